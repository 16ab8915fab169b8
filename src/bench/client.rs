//! The bench's side of the API, on the Rust client SDK (`clients/rust`): the connection
//! options from the flags, job specs, fresh queue names, and worker streams (the SDK's
//! low-level `subscribe`: credits given once, acks and fails sent on the same stream, no
//! handler machinery in the hot loop).

use std::sync::atomic::{AtomicUsize, Ordering};

use anyhow::Context;
use jobwire_client::{pb, ClientOptions, LeaseStream, StreamSender, TlsOptions};

use crate::bench::BenchArgs;

/// A connection of the bench: one HTTP/2 connection, the token added to every call.
pub type Conn = jobwire_client::Client;

/// Where and how the bench connects: `--server`, TLS from `--tls-*`, `--token`.
#[derive(Clone)]
pub struct Target {
    server: String,
    options: ClientOptions,
}

impl Target {
    /// Reads the `--tls-*` files of `a`; errors name the flag.
    pub fn new(a: &BenchArgs) -> anyhow::Result<Target> {
        let read = |flag: &str, p: &std::path::Path| {
            std::fs::read(p).with_context(|| format!("{flag} {}: cannot read", p.display()))
        };
        let tls = match &a.tls_ca {
            None => {
                if a.tls_cert.is_some() || a.tls_key.is_some() || a.tls_server_name.is_some() {
                    anyhow::bail!("--tls-cert, --tls-key and --tls-server-name need --tls-ca");
                }
                if a.server.starts_with("https://") {
                    anyhow::bail!("an https:// --server needs --tls-ca (the CA to trust)");
                }
                None
            }
            Some(ca) => {
                let (cert_pem, key_pem) = match (&a.tls_cert, &a.tls_key) {
                    (Some(c), Some(k)) => {
                        (Some(read("--tls-cert", c)?), Some(read("--tls-key", k)?))
                    }
                    (None, None) => (None, None),
                    _ => anyhow::bail!("--tls-cert and --tls-key go together"),
                };
                Some(TlsOptions {
                    ca_pem: Some(read("--tls-ca", ca)?),
                    cert_pem,
                    key_pem,
                    server_name: a.tls_server_name.clone(),
                })
            }
        };
        let token = a.token.as_ref().map(|t| t.0.clone());
        if token
            .as_ref()
            .is_some_and(|t| !t.bytes().all(|b| (0x20..0x7f).contains(&b)))
        {
            anyhow::bail!("--token must be printable ASCII");
        }
        Ok(Target {
            server: a.server.clone(),
            options: ClientOptions {
                token,
                tls,
                ..Default::default()
            },
        })
    }
}

/// Connects one HTTP/2 connection to the target (the SDK sets wide flow-control windows,
/// so many leases and acks fit in flight on one stream).
pub async fn connect(t: &Target) -> anyhow::Result<Conn> {
    Conn::connect(&t.server, t.options.clone())
        .await
        .with_context(|| format!("cannot connect to {}", t.server))
}

static QUEUE_SEQ: AtomicUsize = AtomicUsize::new(0);

/// `count` queue names no earlier scenario of this process (or another process) used.
pub fn fresh_queues(count: usize) -> Vec<String> {
    let seq = QUEUE_SEQ.fetch_add(1, Ordering::Relaxed);
    let pid = std::process::id();
    (0..count.max(1))
        .map(|q| format!("bench-{pid}-{seq}-{q}"))
        .collect()
}

/// How the jobs of a scenario are built.
#[derive(Clone, Debug, Default)]
pub struct SpecOpts {
    /// Payload size in bytes (filled with a repeating pattern; the first 8 bytes may carry
    /// a timestamp).
    pub payload: usize,
    /// max_attempts (None: the server's default).
    pub max_attempts: Option<u32>,
    /// Backoff of the retry policy.
    pub backoff: Option<pb::Backoff>,
    /// Group keys spread over (job i: `g<i mod groups>`); 0: none.
    pub groups: usize,
}

/// Job `i` of a scenario: id `i`, on queue `i mod queues.len()`, in group `g<i mod groups>`
/// when `o.groups` > 0.
pub fn spec(queues: &[String], i: usize, o: &SpecOpts) -> pb::JobSpec {
    pb::JobSpec {
        queue: queues[i % queues.len()].clone(),
        job_id: i.to_string(),
        name: "j".into(),
        payload: vec![b'x'; o.payload],
        max_attempts: o.max_attempts,
        backoff: o.backoff,
        group_key: if o.groups > 0 {
            format!("g{}", i % o.groups)
        } else {
            String::new()
        },
        ..Default::default()
    }
}

/// A fixed backoff of `ms` milliseconds.
pub fn fixed_backoff(ms: u64) -> pb::Backoff {
    pb::Backoff {
        kind: pb::BackoffKind::Fixed as i32,
        delay: Some(prost_types::Duration {
            seconds: (ms / 1000) as i64,
            nanos: ((ms % 1000) * 1_000_000) as i32,
        }),
        ..Default::default()
    }
}

/// An exponential backoff starting at 1 s (the BullMQ harness's option-cost variant).
pub fn exponential_backoff() -> pb::Backoff {
    pb::Backoff {
        kind: pb::BackoffKind::Exponential as i32,
        delay: Some(prost_types::Duration {
            seconds: 1,
            nanos: 0,
        }),
        ..Default::default()
    }
}

/// Sets keep_completed 0 on `queues`: a completed job is deleted at its ack, as the BullMQ
/// harness's `removeOnComplete: true` does, so both keep the same data.
pub async fn remove_on_complete(ch: &Conn, queues: &[String]) -> anyhow::Result<()> {
    for q in queues {
        let config = pb::QueueConfig {
            retention: Some(pb::Retention {
                keep_completed: Some(0),
                ..Default::default()
            }),
            ..Default::default()
        };
        ch.update_queue_config(q, config, &["retention"])
            .await
            .with_context(|| format!("UpdateQueueConfig {q}"))?;
    }
    Ok(())
}

/// Enqueues `n` jobs in EnqueueBatch calls of `batch`; fails on any item error.
pub async fn prefill(
    ch: &Conn,
    queues: &[String],
    n: usize,
    batch: usize,
    o: &SpecOpts,
) -> anyhow::Result<()> {
    let mut i = 0;
    while i < n {
        let end = (i + batch.max(1)).min(n);
        let specs = (i..end).map(|j| spec(queues, j, o)).collect();
        for r in ch.enqueue_specs(specs, false).await? {
            if let Err(e) = r {
                anyhow::bail!("enqueue failed: {}", e.message);
            }
        }
        i = end;
    }
    Ok(())
}

/// One worker stream: the sender of its requests and the stream of its responses.
pub struct Stream {
    /// Requests (acks, fails) go here.
    pub tx: StreamSender,
    /// Leases and Settled replies come from here.
    pub rx: LeaseStream,
}

impl Stream {
    /// Opens a Subscribe stream on `queues` with `credits`.
    pub async fn open(ch: &Conn, queues: &[String], credits: u32) -> anyhow::Result<Stream> {
        let (tx, rx) = ch.subscribe(queues, credits, "").await?;
        Ok(Stream { tx, rx })
    }

    /// Acks `lease` on the stream.
    pub fn ack(&self, lease: &pb::Lease) {
        self.tx.ack(lease);
    }

    /// Fails `lease` with disposition RETRY on the stream.
    pub fn fail_retry(&self, lease: &pb::Lease) {
        let (queue, job_id) = jobwire_client::stream::lease_ids(lease);
        self.tx.fail(pb::FailRequest {
            queue,
            job_id,
            lease_token: lease.lease_token.clone(),
            disposition: pb::FailDisposition::Retry as i32,
            error: Some(pb::JobError {
                message: "boom".into(),
                error_type: "Bench".into(),
                details: String::new(),
            }),
            ..Default::default()
        });
    }
}
