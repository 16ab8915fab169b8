//! The README's producer and worker snippets, run against a real server. Each ```rust
//! block of README.md must appear verbatim in this file (`readme_snippets_are_these`), so
//! the README cannot drift from code that runs.

mod support;

use std::time::Duration;

use jobwire_client::pb;

// --- the README's snippets (kept verbatim; rustfmt would reflow them) ---

#[rustfmt::skip]
mod producer {
use jobwire_client::{Client, ClientOptions, EnqueueOptions, Payload};

pub async fn produce(target: &str) -> Result<(), jobwire_client::Error> {
    let client = Client::connect(target, ClientOptions::default()).await?;
    let welcome = Payload::json(&serde_json::json!({"to": "ada@example.com"}))?;
    let options = EnqueueOptions {
        job_id: Some("welcome:ada".into()), max_attempts: Some(3), ..Default::default()
    };
    let job = client.enqueue("emails", "send-welcome", welcome, options).await?;
    println!("enqueued {} (created: {})", job.job.job_id, job.created);
    Ok(())
}
}

#[rustfmt::skip]
mod worker {
use jobwire_client::{Client, ClientOptions, Ctx, Job, JobError, Worker, WorkerOptions};

#[derive(serde::Deserialize)]
struct Welcome { to: String }

pub async fn work(target: &str) -> Result<(), jobwire_client::Error> {
    let client = Client::connect(target, ClientOptions::default()).await?;
    let options = WorkerOptions { queues: vec!["emails".into()], concurrency: 8, ..Default::default() };
    let mut worker = Worker::new(client, options);
    worker.handle("send-welcome", |job: Job<Welcome>, _ctx: Ctx| async move {
        if !job.payload.to.contains('@') { return Err(JobError::non_retryable("no address")); }
        println!("emailing {} (idempotency key {})", job.payload.to, job.idempotency_key);
        Ok(())
    });
    worker.run().await // until SIGTERM/SIGINT: drains held jobs, then returns
}
}

#[tokio::test]
async fn the_readme_producer_and_worker_run() {
    let server = support::server(&[]).await;
    producer::produce(&server.target()).await.expect("produce");
    let worker = tokio::spawn({
        let target = server.target();
        async move { worker::work(&target).await }
    });
    let client = server.client().await.expect("connect");
    let job = support::finished(&client, "emails", "welcome:ada").await;
    assert_eq!(job.state, pb::JobState::Completed as i32, "{job:?}");
    worker.abort();
    let _ = tokio::time::timeout(Duration::from_secs(5), worker).await;
}

#[test]
fn readme_snippets_are_these() {
    let dir = env!("CARGO_MANIFEST_DIR");
    let readme = std::fs::read_to_string(format!("{dir}/README.md")).expect("README.md");
    let this = std::fs::read_to_string(format!("{dir}/tests/readme.rs")).expect("this file");
    let mut blocks = 0;
    let mut rest = readme.as_str();
    while let Some(start) = rest.find("```rust\n") {
        let body = &rest[start + 8..];
        let end = body.find("```").expect("closed block");
        let block = &body[..end];
        assert!(
            this.contains(block),
            "README block not in tests/readme.rs:\n{block}"
        );
        blocks += 1;
        rest = &body[end + 3..];
    }
    assert!(blocks >= 2, "the producer and the worker snippets");
}
