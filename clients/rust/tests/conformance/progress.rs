//! Progress, checkpoints and results: checkpoint_resumes_next_attempt,
//! result_attached_at_ack.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use jobwire_client::{pb, Ctx, EnqueueOptions, Job, JobError, Worker};

use crate::support;

fn with_id(id: &str) -> EnqueueOptions {
    EnqueueOptions {
        job_id: Some(id.into()),
        ..Default::default()
    }
}

#[tokio::test]
async fn checkpoint_resumes_next_attempt() {
    let (server, p) = crate::server_for("checkpoint_resumes_next_attempt").await;
    let (checkpoint, first) = (
        support::param_str(&p, "checkpoint"),
        crate::param(&p, "first_progress") as u32,
    );
    let client = server.client().await.expect("connect");
    let q = support::queue("checkpoint");
    const MSG: &str = "downloaded, converting";
    let seen = Arc::new(Mutex::new(Vec::<Option<Vec<u8>>>::new()));
    let errors = Arc::new(Mutex::new(Vec::<String>::new()));
    let mut worker = Worker::new(client.clone(), support::options(&q, 1));
    {
        let (seen, errors, checkpoint) = (seen.clone(), errors.clone(), checkpoint.clone());
        worker.handle_bytes("convert", move |job: Job<Vec<u8>>, ctx: Ctx| {
            let (seen, errors, checkpoint) = (seen.clone(), errors.clone(), checkpoint.clone());
            async move {
                seen.lock()
                    .expect("lock")
                    .push(job.checkpoint().map(<[u8]>::to_vec));
                let note = |r: Result<(), jobwire_client::Error>| {
                    if let Err(e) = r {
                        errors.lock().expect("lock").push(e.to_string());
                    }
                };
                if job.attempt == 1 {
                    note(ctx.progress(first, MSG).await);
                    note(ctx.save_checkpoint(checkpoint.into_bytes()).await);
                    return Err(JobError::failed("ConverterCrash", "converter crashed"));
                }
                note(ctx.progress(100, "").await);
                Ok(())
            }
        });
    }
    let w = support::run(worker);
    let o = EnqueueOptions {
        max_attempts: Some(2),
        ..with_id("k1")
    };
    client
        .enqueue(&q, "convert", b"x".to_vec(), o)
        .await
        .expect("enqueue");
    let job = support::in_state(
        &client,
        &q,
        "k1",
        pb::JobState::Completed,
        Duration::from_secs(20),
    )
    .await;
    w.stop().await;
    assert!(
        errors.lock().expect("lock").is_empty(),
        "{:?}",
        errors.lock()
    );
    assert_eq!(
        *seen.lock().expect("lock"),
        vec![None, Some(checkpoint.clone().into_bytes())]
    );
    assert_eq!(job.attempts_made, 2);
    assert_eq!(job.progress, 100);
    assert_eq!(job.progress_message, MSG);
    assert_eq!(job.checkpoint, checkpoint.into_bytes());
    assert!(job.progress_time.is_some());
}

#[tokio::test]
async fn result_attached_at_ack() {
    let (server, p) = crate::server_for("result_attached_at_ack").await;
    let result = support::param_str(&p, "result");
    let client = server.client().await.expect("connect");
    let q = support::queue("result");
    let mut worker = Worker::new(client.clone(), support::options(&q, 1));
    {
        let result = result.clone();
        worker.handle_bytes("answer", move |_job: Job<Vec<u8>>, ctx: Ctx| {
            let result = result.clone();
            async move {
                ctx.set_result(b"not this".to_vec()); // replaced: the last one counts
                ctx.set_result(result.into_bytes());
                Ok(())
            }
        });
    }
    let w = support::run(worker);
    client
        .enqueue(&q, "answer", b"x".to_vec(), with_id("r1"))
        .await
        .expect("enqueue");
    let job = support::in_state(
        &client,
        &q,
        "r1",
        pb::JobState::Completed,
        Duration::from_secs(20),
    )
    .await;
    w.stop().await;
    assert_eq!(job.result, result.into_bytes());
}
