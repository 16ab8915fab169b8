//! The soak's producers and canceller: batches enqueued with their ids (retried with the same
//! ids until acknowledged; a share with a job timeout under the server's 20 ms confirmation
//! delay), single Enqueues without an id (the server picks it: retried by the client only when
//! the server says so is safe, each tagged in its payload so a duplicate shows), and CancelJob
//! of random enqueued jobs on a queue whose cancel grace is 0 (the holder is revoked at once).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use jobwire::pb;
use rand::{Rng, SeedableRng};
use tokio_util::sync::CancellationToken;

use super::{pick, Servers, Stats, MAX_ATTEMPTS, QUEUE};
use crate::harness::spec;

/// One batch in this many carries a job timeout of 5-15 ms: under the server's 20 ms
/// confirmation delay (`CONFIRM_DELAY`), so attempts time out before their lease call is
/// confirmed.
const SHORT_TIMEOUT_EVERY: usize = 10;

/// Enqueues batch number `k` (`ids`) on some replica, retrying (same ids: idempotent) until
/// one answers OK.
pub(super) async fn enqueue_until_ok(
    servers: &Servers,
    k: usize,
    ids: &[String],
    rng: &mut impl Rng,
) {
    let timeout = (k % SHORT_TIMEOUT_EVERY == 1).then(|| prost_types::Duration {
        seconds: 0,
        nanos: rng.random_range(5..=15) * 1_000_000,
    });
    loop {
        let (_, channel) = pick(servers, rng);
        let jobs = ids
            .iter()
            .map(|id| pb::JobSpec {
                max_attempts: Some(MAX_ATTEMPTS),
                timeout,
                ..spec(QUEUE, id)
            })
            .collect();
        let mut client = pb::job_service_client::JobServiceClient::new(channel);
        let call = client.enqueue_batch(pb::EnqueueBatchRequest { jobs });
        if let Ok(Ok(r)) = tokio::time::timeout(Duration::from_secs(10), call).await {
            if r.get_ref().results.iter().all(|r| r.job.is_some()) {
                return;
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The payload of id-less Enqueue number `n`.
pub(super) fn idless_payload(n: u64) -> Vec<u8> {
    format!("idless-{n}").into_bytes()
}

/// Enqueues single jobs without an id, one every 20-40 ms, until `stop`. An Enqueue answered
/// OK records the id the server chose; one answered with an error (after the server's own
/// retries) is recorded as of unknown outcome: its job may or may not exist, but never twice.
pub(super) async fn idless(servers: Servers, stats: Arc<Stats>, stop: CancellationToken) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(77);
    let mut n = 0u64;
    while !stop.is_cancelled() {
        let (_, channel) = pick(&servers, &mut rng);
        let job = pb::JobSpec {
            max_attempts: Some(MAX_ATTEMPTS),
            payload: idless_payload(n),
            ..spec(QUEUE, "")
        };
        let mut client = pb::job_service_client::JobServiceClient::new(channel);
        let call = client.enqueue(pb::EnqueueRequest { job: Some(job) });
        let outcome = tokio::time::timeout(Duration::from_secs(15), call).await;
        let acknowledged = match outcome {
            Ok(Ok(r)) => Some(r.into_inner().job.map(|j| j.job_id).unwrap_or_default()),
            Ok(Err(_)) | Err(_) => None,
        };
        {
            let mut idless = stats.idless.lock().expect("idless");
            if let Some(id) = acknowledged {
                idless.acknowledged.insert(n, id);
            } else {
                idless.unknown.insert(n);
            }
        }
        n += 1;
        tokio::time::sleep(Duration::from_millis(rng.random_range(20..=40))).await;
    }
}

/// Cancels a random job among those enqueued so far (acknowledged batches), one every
/// 100-200 ms, until `stop`. The queue's cancel grace is 0: a leased job's holder is told and
/// its lease revoked at once.
pub(super) async fn canceller(servers: Servers, stats: Arc<Stats>, stop: CancellationToken) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(55);
    while !stop.is_cancelled() {
        tokio::time::sleep(Duration::from_millis(rng.random_range(100..=200))).await;
        let id = {
            let known = stats.known.lock().expect("known");
            if known.is_empty() {
                continue;
            }
            known[rng.random_range(0..known.len())].clone()
        };
        let (_, channel) = pick(&servers, &mut rng);
        let mut client = pb::job_service_client::JobServiceClient::new(channel);
        let call = client.cancel_job(pb::CancelJobRequest {
            queue: QUEUE.into(),
            job_id: id,
            reason: "chaos".into(),
        });
        if let Ok(Ok(r)) = tokio::time::timeout(Duration::from_secs(10), call).await {
            if r.get_ref().cancelled {
                stats.cancels.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}
