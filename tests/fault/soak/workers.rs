//! The soak's clients: workers that ack (after 0-30 ms), fail, hang and reconnect; worker
//! child processes
//! SIGKILLed mid-job; and a worker that stops reading its stream. Every lease a client reads
//! is recorded in [`Stats`], so the soak can check that no job was charged an attempt for a
//! lease that never reached a worker.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use jobwire::pb;
use jobwire::pb::worker_service_client::WorkerServiceClient;
use pb::subscribe_request::Message as In;
use pb::subscribe_response::Message as Out;
use rand::{Rng, SeedableRng};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tonic::Streaming;

use super::{pick, Servers, Stats, CREDITS, QUEUE};

/// Credits of the worker that stops reading.
const STALL_CREDITS: u32 = 200;
use crate::procs::WorkerProc;

/// Opens a Subscribe stream on `channel`; None if the server could not be reached.
async fn open(
    channel: tonic::transport::Channel,
    credits: u32,
    worker_id: String,
) -> Option<(
    mpsc::UnboundedSender<pb::SubscribeRequest>,
    Streaming<pb::SubscribeResponse>,
)> {
    let (tx, rx) = mpsc::unbounded_channel();
    let open = In::Open(pb::OpenStream {
        queues: vec![QUEUE.into()],
        credits,
        worker_id,
    });
    tx.send(pb::SubscribeRequest {
        message: Some(open),
    })
    .ok()?;
    let resp = WorkerServiceClient::new(channel)
        .subscribe(tokio_stream::wrappers::UnboundedReceiverStream::new(rx))
        .await
        .ok()?;
    Some((tx, resp.into_inner()))
}

/// Reads what the transport already holds for a stream the worker is abandoning (its
/// sending half already closed, so the server ends the stream after what it sent), recording
/// each lease as delivered: those leases did reach the worker's process, so charging them an
/// attempt when they expire is right. Stops at the end of the stream, an error, or 10 s.
async fn read_rest(stream: &mut Streaming<pb::SubscribeResponse>, stats: &Stats, worker_id: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while let Ok(Ok(Some(m))) = tokio::time::timeout_at(deadline, stream.message()).await {
        if let Some(Out::Lease(l)) = m.message {
            if let Some(job) = l.job {
                stats.delivered(&job.job_id, l.attempt, worker_id);
            }
        }
    }
}

/// A worker that reconnects forever (each stream under its own worker id, `soak-<n>-<k>`):
/// per lease it acks after 0-30 ms (89 %: long enough for the short job timeouts to pass
/// first), fails RETRY (10 %) or hangs (1 %: goes silent past the heartbeat timeout, then
/// abandons its stream).
pub(super) async fn worker(n: u64, servers: Servers, stats: Arc<Stats>, stop: CancellationToken) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(n);
    for k in 0.. {
        if stop.is_cancelled() {
            return;
        }
        let (addr, channel) = pick(&servers, &mut rng);
        let worker_id = format!("soak-{n}-{k}");
        stats.opened(&worker_id, &addr, CREDITS);
        let Some((tx, mut stream)) = open(channel, CREDITS, worker_id.clone()).await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let mut beat = tokio::time::interval(Duration::from_millis(250));
        loop {
            let msg = tokio::select! {
                _ = stop.cancelled() => return,
                _ = beat.tick() => {
                    let hb = pb::SubscribeRequest { message: Some(In::Heartbeat(pb::Heartbeat {})) };
                    if tx.send(hb).is_err() { break }
                    continue;
                }
                m = stream.message() => m,
            };
            match msg {
                Ok(Some(pb::SubscribeResponse {
                    message: Some(Out::Lease(l)),
                })) => {
                    let job = l.job.as_ref().expect("job");
                    stats.delivered(&job.job_id, l.attempt, &worker_id);
                    let (queue, job_id, lease_token) =
                        (job.queue.clone(), job.job_id.clone(), l.lease_token.clone());
                    let r: f64 = rng.random();
                    let m = if r < 0.01 {
                        stats.hangs.fetch_add(1, Ordering::Relaxed);
                        tokio::time::sleep(Duration::from_millis(1500)).await;
                        break;
                    } else if r < 0.11 {
                        stats.fails.fetch_add(1, Ordering::Relaxed);
                        In::Fail(pb::FailRequest {
                            pause_group: false,
                            queue,
                            job_id,
                            lease_token,
                            disposition: pb::FailDisposition::Retry as i32,
                            error: Some(pb::JobError {
                                message: "chaos".into(),
                                error_type: "chaos".into(),
                                details: String::new(),
                            }),
                            retry_after: None,
                            pause_queue: false,
                        })
                    } else {
                        In::Ack(pb::AckRequest {
                            result: Vec::new(),
                            queue,
                            job_id,
                            lease_token,
                        })
                    };
                    let delay = Duration::from_millis(rng.random_range(0..=30));
                    let tx = tx.clone();
                    tokio::spawn(async move {
                        tokio::time::sleep(delay).await;
                        let _ = tx.send(pb::SubscribeRequest { message: Some(m) });
                    });
                }
                Ok(Some(pb::SubscribeResponse {
                    message: Some(Out::Settled(s)),
                })) => {
                    if s.code == 0 && s.state == pb::JobState::Completed as i32 {
                        if let Ok(mut a) = stats.acks.lock() {
                            *a.entry(s.job_id).or_default() += 1;
                        }
                    }
                }
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => break,
            }
        }
        drop(tx);
        read_rest(&mut stream, &stats, &worker_id).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Spawns worker child processes (one credit each) on random replicas and SIGKILLs each
/// mid-job. A child killed before it reported a lease may still have had one in flight:
/// those kills are counted apart, as the only leases the soak cannot see arrive.
pub(super) async fn killer(servers: Servers, stats: Arc<Stats>, stop: CancellationToken) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(99);
    while !stop.is_cancelled() {
        let (addr, _) = pick(&servers, &mut rng);
        let mut child = WorkerProc::spawn(&addr, QUEUE);
        let leased = tokio::select! {
            l = child.leased(Duration::from_secs(5)) => l,
            _ = stop.cancelled() => None,
        };
        child.sigkill().await;
        match leased {
            Some(l) => {
                stats.delivered(&l.job_id, l.attempt, "child");
                stats.kills.fetch_add(1, Ordering::Relaxed);
            }
            None => {
                stats.unreported_kills.fetch_add(1, Ordering::Relaxed);
            }
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// A worker that stops reading: it opens a stream (worker id `stalled-reader-<k>`) with many
/// credits, reads one lease, then heartbeats for `stall` without reading a byte (its HTTP/2
/// window fills up). Then it drains and closes its half of the stream, reads what the
/// transport already holds until the server ends the stream, walks away without settling
/// anything, and starts over. The leases it read expire and are charged; the ones that never
/// left the server must come back without an attempt.
pub(super) async fn stalled_reader(
    servers: Servers,
    stats: Arc<Stats>,
    stall: Duration,
    stop: CancellationToken,
) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(4242);
    for k in 0.. {
        if stop.is_cancelled() {
            return;
        }
        let (addr, _) = pick(&servers, &mut rng);
        // A small HTTP/2 window: a few leases fill it, the rest must wait inside the server.
        let channel = tonic::transport::Channel::from_shared(format!("http://{addr}"))
            .expect("uri")
            .initial_stream_window_size(Some(4096))
            .connect_lazy();
        let worker_id = format!("stalled-reader-{k}");
        stats.opened(&worker_id, &addr, STALL_CREDITS);
        let Some((tx, mut stream)) = open(channel, STALL_CREDITS, worker_id.clone()).await else {
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        };
        // Stopped before the first lease came: still drain and read what was sent below.
        let first = tokio::select! {
            _ = stop.cancelled() => None,
            m = tokio::time::timeout(Duration::from_secs(5), stream.message()) => Some(m),
        };
        if let Some(Ok(Ok(Some(pb::SubscribeResponse {
            message: Some(Out::Lease(l)),
        })))) = first
        {
            if let Some(job) = l.job {
                stats.delivered(&job.job_id, l.attempt, &worker_id);
            }
        }
        stats.stalls.fetch_add(1, Ordering::Relaxed);
        let until = tokio::time::Instant::now() + stall;
        while tokio::time::Instant::now() < until && !stop.is_cancelled() {
            let hb = pb::SubscribeRequest {
                message: Some(In::Heartbeat(pb::Heartbeat {})),
            };
            if tx.send(hb).is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let _ = tx.send(pb::SubscribeRequest {
            message: Some(In::Drain(pb::DrainStream {})),
        });
        drop(tx);
        read_rest(&mut stream, &stats, &worker_id).await;
        drop(stream);
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
