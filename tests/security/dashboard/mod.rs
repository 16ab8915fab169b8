//! The web dashboard (`serve --ui`) over real HTTP: a real server with an auth file, a
//! plain HTTP client that keeps the session cookie by hand, and every effect checked
//! through the gRPC API (never through the dashboard itself).

mod access;
mod actions;
mod audit;
mod browser;
mod dead_filter;
mod hosts;
mod pages;
mod readings;
mod sessions;
mod urls;

use std::time::Duration;

use jobwire::pb;

use crate::secured::*;
pub use browser::Browser;

/// The admin of the dashboard tests: may enqueue, work and administer every queue.
pub fn ops() -> Who {
    Who::new("ops-oncall", &[(&["*"], &["producer", "worker", "admin"])])
}

/// A viewer of every queue.
pub fn watcher() -> Who {
    Who::new("watcher", &[(&["*"], &["viewer"])])
}

/// A server over TLS with `who` in its auth file and the dashboard on (`read_only`:
/// `--ui-read-only`).
pub async fn start(who: &[&Who], read_only: bool) -> Secured {
    Secured::start_with(who, false, None, |cfg| {
        cfg.ui.enabled = true;
        cfg.ui.read_only = read_only;
    })
    .await
}

/// Enqueues `spec` as `c`.
pub async fn put(c: &mut Clients, spec: pb::JobSpec) {
    c.jobs
        .enqueue(pb::EnqueueRequest { job: Some(spec) })
        .await
        .expect("enqueue");
}

/// Makes `id` dead on `queue`: enqueued with one attempt, leased by a fresh stream of `c`,
/// failed with `error_type` and `message`.
pub async fn kill(
    c: &mut Clients,
    queue: &str,
    id: &str,
    name: &str,
    error_type: &str,
    payload: &[u8],
) {
    put(
        c,
        pb::JobSpec {
            name: name.into(),
            max_attempts: Some(1),
            payload: payload.to_vec(),
            ..job(queue, id)
        },
    )
    .await;
    let mut s = c.subscribe(&[queue], 1).await.expect("subscribe");
    let l = s.lease().await;
    assert_eq!(l.job.as_ref().expect("job").job_id, id);
    s.send(pb::subscribe_request::Message::Fail(pb::FailRequest {
        pause_group: false,
        queue: queue.into(),
        job_id: id.into(),
        lease_token: l.lease_token.clone(),
        disposition: pb::FailDisposition::Retry as i32,
        error: Some(pb::JobError {
            message: format!("{error_type}: it broke"),
            error_type: error_type.into(),
            details: String::new(),
        }),
        retry_after: None,
        pause_queue: false,
    }));
    match s.next(Duration::from_secs(10)).await {
        Ok(Some(pb::subscribe_response::Message::Settled(st))) => {
            assert_eq!(st.state, pb::JobState::Dead as i32, "{st:?}")
        }
        other => panic!("expected the fail to settle, got {other:?}"),
    }
}

/// The job's state through gRPC.
pub async fn state(c: &mut Clients, queue: &str, id: &str) -> pb::JobState {
    let j = c
        .jobs
        .get_job(pb::GetJobRequest {
            queue: queue.into(),
            job_id: id.into(),
        })
        .await
        .expect("get job")
        .into_inner()
        .job
        .expect("job");
    pb::JobState::try_from(j.state).expect("state")
}

/// Is `queue` paused, through gRPC?
pub async fn paused(c: &mut Clients, queue: &str) -> bool {
    c.queues
        .get_queue_stats(pb::GetQueueStatsRequest {
            queue: queue.into(),
        })
        .await
        .expect("stats")
        .into_inner()
        .stats
        .expect("stats")
        .paused
}
