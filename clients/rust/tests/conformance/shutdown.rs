//! sigterm_drains: a worker in its own process (this test binary re-run as the child
//! `shutdown::sigterm_child`, signal handling on) drains on SIGTERM.

use std::process::Stdio;
use std::time::{Duration, Instant};

use jobwire_client::{pb, ClientOptions, Ctx, EnqueueOptions, Job, Worker, WorkerOptions};

use crate::support;

const CHILD_ENV: &str = "JOBWIRE_CLIENT_TEST_SIGTERM_CHILD";

#[tokio::test]
async fn sigterm_drains() {
    let (server, p) = crate::server_for("sigterm_drains").await;
    let (handler_ms, signal_after_ms) = (
        crate::param(&p, "handler_ms"),
        crate::param(&p, "signal_after_ms"),
    );
    let client = server.client().await.expect("connect");
    let q = support::queue("sigterm");
    let o = |id: &str| EnqueueOptions {
        job_id: Some(id.into()),
        ..Default::default()
    };
    client
        .enqueue(&q, "sleep", b"null".to_vec(), o("held"))
        .await
        .expect("enqueue");
    let mut child = tokio::process::Command::new(std::env::current_exe().expect("exe"))
        .args([
            "--exact",
            "shutdown::sigterm_child",
            "--ignored",
            "--nocapture",
        ])
        .env(CHILD_ENV, format!("{} {q} {handler_ms}", server.target()))
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn the worker process");
    let pid = child.id().expect("pid");
    support::eventually(Duration::from_secs(20), "the job is leased", || async {
        let j = client.get_job(&q, "held").await.ok()?;
        (j.state == pb::JobState::Active as i32).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(signal_after_ms)).await;
    let signalled = Instant::now();
    let kill = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .expect("kill");
    assert!(kill.success());
    tokio::time::sleep(Duration::from_millis(100)).await;
    client
        .enqueue(&q, "sleep", b"null".to_vec(), o("after"))
        .await
        .expect("enqueue after the signal");

    let status = tokio::time::timeout(Duration::from_secs(25), child.wait())
        .await
        .expect("exits before the grace ends")
        .expect("wait");
    let out = child.stdout.take();
    assert!(status.success(), "worker exit status {status} ({out:?})");
    assert!(signalled.elapsed() < Duration::from_secs(25));
    let held = client.get_job(&q, "held").await.expect("held job");
    assert_eq!(held.state, pb::JobState::Completed as i32, "{held:?}");
    assert_eq!(held.attempts_made, 1);
    let after = client.get_job(&q, "after").await.expect("second job");
    assert_eq!(
        after.state,
        pb::JobState::Waiting as i32,
        "not leased: {after:?}"
    );
    assert_eq!(after.attempts_made, 0);
}

/// The worker process of `sigterm_drains` (skipped unless that test runs it).
#[tokio::test]
#[ignore = "run by sigterm_drains as its worker process"]
async fn sigterm_child() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    let mut parts = spec.split(' ');
    let (target, queue, ms) = (
        parts.next().expect("target"),
        parts.next().expect("queue"),
        parts.next().expect("ms").parse::<u64>().expect("ms"),
    );
    support::init_tracing();
    let client = jobwire_client::Client::connect(target, ClientOptions::default())
        .await
        .expect("connect");
    let mut worker = Worker::new(
        client,
        WorkerOptions {
            queues: vec![queue.to_owned()],
            concurrency: 2,
            ..Default::default() // handle_signals: true
        },
    );
    worker.handle(
        "sleep",
        move |_job: Job<serde_json::Value>, _ctx: Ctx| async move {
            tokio::time::sleep(Duration::from_millis(ms)).await;
            Ok(())
        },
    );
    worker.run().await.expect("worker");
}

/// shutdown_hands_back_uncharged: a handler outlives the grace on a max_attempts 1 job; the
/// worker hands it back uncharged (RELEASE), so it is not dead-lettered and a second worker
/// runs it as attempt 1.
#[tokio::test]
async fn shutdown_hands_back_uncharged() {
    let (server, p) = crate::server_for("shutdown_hands_back_uncharged").await;
    let (grace_ms, handler_ms, max) = (
        crate::param(&p, "grace_ms"),
        crate::param(&p, "handler_ms"),
        crate::param(&p, "max_attempts") as u32,
    );
    let client = server.client().await.expect("connect");
    let q = support::queue("handback");
    client
        .enqueue(
            &q,
            "slow",
            b"{}".to_vec(),
            EnqueueOptions {
                job_id: Some("held".into()),
                max_attempts: Some(max),
                ..Default::default()
            },
        )
        .await
        .expect("enqueue");
    let attempts = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let started = std::sync::Arc::new(tokio::sync::Notify::new());
    let mut first = Worker::new(
        client.clone(),
        WorkerOptions {
            grace: Duration::from_millis(grace_ms),
            ..support::options(&q, 1)
        },
    );
    let (a, st) = (attempts.clone(), started.clone());
    first.handle("slow", move |job: Job<serde_json::Value>, _ctx: Ctx| {
        let (a, st) = (a.clone(), st.clone());
        async move {
            a.lock().expect("lock").push(job.attempt);
            st.notify_one();
            tokio::time::sleep(Duration::from_millis(handler_ms)).await;
            Ok(())
        }
    });
    let running = support::run(first);
    started.notified().await;
    running.stop().await;
    let job = client.get_job(&q, "held").await.expect("job");
    assert!(
        (job.state == pb::JobState::Waiting as i32 || job.state == pb::JobState::Active as i32)
            && job.attempts_made == 0
            && job.errors.is_empty(),
        "handed back uncharged: {job:?}"
    );
    let dead = client
        .list_dead_letters(&q, 100, "", None)
        .await
        .expect("list dead letters")
        .dead_letters;
    assert!(dead.is_empty(), "dead-lettered: {dead:?}");
    let mut second = Worker::new(client.clone(), support::options(&q, 1));
    let a = attempts.clone();
    second.handle("slow", move |job: Job<serde_json::Value>, _ctx: Ctx| {
        let a = a.clone();
        async move {
            a.lock().expect("lock").push(job.attempt);
            Ok(())
        }
    });
    let running = support::run(second);
    let job = support::finished(&client, &q, "held").await;
    running.stop().await;
    assert_eq!(job.state, pb::JobState::Completed as i32);
    assert_eq!(job.attempts_made, 1);
    assert_eq!(*attempts.lock().expect("lock"), vec![1, 1]);
}
