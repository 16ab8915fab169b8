//! The bench's side of the API: a gRPC channel to the server, job specs, fresh queue names,
//! and worker streams (Subscribe with credits; acks and fails sent on the same stream).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::Context;
use tokio::sync::mpsc;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::interceptor::InterceptedService;
use tonic::service::Interceptor;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};
use tonic::Streaming;

use crate::bench::BenchArgs;
use crate::pb;
use crate::pb::job_service_client::JobServiceClient;
use crate::pb::subscribe_request::Message as In;
use crate::pb::worker_service_client::WorkerServiceClient;

/// A connection of the bench: one HTTP/2 connection, the token added to every call.
pub type Conn = InterceptedService<Channel, Token>;

/// Adds `authorization: Bearer <token>` to every call when a token is set.
#[derive(Clone)]
pub struct Token(Option<MetadataValue<Ascii>>);

impl Interceptor for Token {
    fn call(&mut self, mut req: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(v) = &self.0 {
            req.metadata_mut().insert("authorization", v.clone());
        }
        Ok(req)
    }
}

/// Where and how the bench connects: `--server`, TLS from `--tls-*`, `--token`.
#[derive(Clone)]
pub struct Target {
    server: String,
    tls: Option<ClientTlsConfig>,
    token: Token,
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
                let mut tls = ClientTlsConfig::new()
                    .ca_certificate(Certificate::from_pem(read("--tls-ca", ca)?));
                match (&a.tls_cert, &a.tls_key) {
                    (Some(c), Some(k)) => {
                        tls = tls.identity(Identity::from_pem(
                            read("--tls-cert", c)?,
                            read("--tls-key", k)?,
                        ))
                    }
                    (None, None) => {}
                    _ => anyhow::bail!("--tls-cert and --tls-key go together"),
                }
                if let Some(name) = &a.tls_server_name {
                    tls = tls.domain_name(name.clone());
                }
                Some(tls)
            }
        };
        let server = match (&tls, a.server.strip_prefix("http://")) {
            (Some(_), Some(rest)) => format!("https://{rest}"),
            _ => a.server.clone(),
        };
        let token = match &a.token {
            None => None,
            Some(t) => Some(
                MetadataValue::try_from(format!("Bearer {}", t.0))
                    .map_err(|_| anyhow::anyhow!("--token must be printable ASCII"))?,
            ),
        };
        Ok(Target {
            server,
            tls,
            token: Token(token),
        })
    }
}

/// Connects one HTTP/2 connection to the target, with wide flow-control windows so that many
/// leases and acks fit in flight on one stream.
pub async fn connect(t: &Target) -> anyhow::Result<Conn> {
    let server = &t.server;
    let mut endpoint = Endpoint::from_shared(server.clone())
        .context("--server is not a valid URI")?
        .tcp_nodelay(true)
        .initial_stream_window_size(Some(4 << 20))
        .initial_connection_window_size(Some(16 << 20))
        .connect_timeout(Duration::from_secs(5));
    if let Some(tls) = &t.tls {
        endpoint = endpoint
            .tls_config(tls.clone())
            .context("--tls-ca, --tls-cert, --tls-key")?;
    }
    let ch = endpoint
        .connect()
        .await
        .with_context(|| format!("cannot connect to {server}"))?;
    Ok(InterceptedService::new(ch, t.token.clone()))
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
}

/// Job `i` of a scenario: id `i`, on queue `i mod queues.len()`.
pub fn spec(queues: &[String], i: usize, o: &SpecOpts) -> pb::JobSpec {
    pb::JobSpec {
        queue: queues[i % queues.len()].clone(),
        job_id: i.to_string(),
        name: "j".into(),
        payload: vec![b'x'; o.payload],
        max_attempts: o.max_attempts,
        backoff: o.backoff,
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
    let mut client = pb::queue_service_client::QueueServiceClient::new(ch.clone());
    for q in queues {
        client
            .update_queue_config(pb::UpdateQueueConfigRequest {
                queue: q.clone(),
                config: Some(pb::QueueConfig {
                    retention: Some(pb::Retention {
                        keep_completed: Some(0),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                update_mask: Some(prost_types::FieldMask {
                    paths: vec!["retention".into()],
                }),
            })
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
    let mut jobs = JobServiceClient::new(ch.clone());
    let mut i = 0;
    while i < n {
        let end = (i + batch.max(1)).min(n);
        let specs = (i..end).map(|j| spec(queues, j, o)).collect();
        let r = jobs
            .enqueue_batch(pb::EnqueueBatchRequest { jobs: specs })
            .await?
            .into_inner();
        if let Some(e) = r.results.iter().find_map(|x| x.error.as_ref()) {
            anyhow::bail!("enqueue failed: {}", e.message);
        }
        i = end;
    }
    Ok(())
}

/// One worker stream: the sender of its requests and the stream of its responses.
pub struct Stream {
    /// Requests (acks, fails) go here.
    pub tx: mpsc::UnboundedSender<pb::SubscribeRequest>,
    /// Leases and Settled replies come from here.
    pub rx: Streaming<pb::SubscribeResponse>,
}

impl Stream {
    /// Opens a Subscribe stream on `queues` with `credits`.
    pub async fn open(ch: &Conn, queues: &[String], credits: u32) -> anyhow::Result<Stream> {
        let (tx, rx) = mpsc::unbounded_channel();
        tx.send(pb::SubscribeRequest {
            message: Some(In::Open(pb::OpenStream {
                queues: queues.to_vec(),
                credits,
                worker_id: String::new(),
            })),
        })?;
        let rx = WorkerServiceClient::new(ch.clone())
            .subscribe(UnboundedReceiverStream::new(rx))
            .await?
            .into_inner();
        Ok(Stream { tx, rx })
    }

    /// Acks `lease` on the stream.
    pub fn ack(&self, lease: &pb::Lease) {
        let (queue, job_id) = ids(lease);
        let _ = self.tx.send(pb::SubscribeRequest {
            message: Some(In::Ack(pb::AckRequest {
                queue,
                job_id,
                lease_token: lease.lease_token.clone(),
            })),
        });
    }

    /// Fails `lease` with disposition RETRY on the stream.
    pub fn fail_retry(&self, lease: &pb::Lease) {
        let (queue, job_id) = ids(lease);
        let _ = self.tx.send(pb::SubscribeRequest {
            message: Some(In::Fail(pb::FailRequest {
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
            })),
        });
    }
}

fn ids(lease: &pb::Lease) -> (String, String) {
    lease
        .job
        .as_ref()
        .map(|j| (j.queue.clone(), j.job_id.clone()))
        .unwrap_or_default()
}
