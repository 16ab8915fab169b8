//! The options of [`super::Client::connect`] and of an Enqueue.

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, SystemTime};

use super::pb_duration;
use crate::{pb, Error, Payload};

/// How to reach the server.
#[derive(Clone, Debug, Default)]
pub struct ClientOptions {
    /// A bearer token, sent as `authorization: Bearer <token>` on every call (see the
    /// server README's "Securing jobwire").
    pub token: Option<String>,
    /// TLS; `None` with an `http://` target: plaintext.
    pub tls: Option<TlsOptions>,
    /// How long connecting may take (default 5 s).
    pub connect_timeout: Option<Duration>,
    /// The connection's HTTP/2 keepalive (see [`Keepalive`]).
    pub keepalive: Keepalive,
}

/// HTTP/2 keepalive: a PING after `interval` without a frame from the server, the connection
/// closed when it goes unanswered for `timeout` (its calls and the worker's stream fail
/// UNAVAILABLE; the worker reconnects). A frozen or vanished server is noticed within
/// `interval + timeout`: 15 s with the default. Both at least 1 s (`connect` refuses less
/// with `Error::InvalidArgument`). The jobwire server answers PINGs without a rate limit; a
/// proxy in between may allow fewer (a gRPC-based one answers PINGs more often than every 5
/// minutes with GOAWAY "too_many_pings").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Keepalive {
    /// Time without a frame from the server before a PING (default 10 s).
    pub interval: Duration,
    /// How long a PING may go unanswered (default 5 s).
    pub timeout: Duration,
    /// Also ping while no call or stream is open (default true).
    pub without_calls: bool,
}

impl Default for Keepalive {
    fn default() -> Keepalive {
        Keepalive {
            interval: Duration::from_secs(10),
            timeout: Duration::from_secs(5),
            without_calls: true,
        }
    }
}

/// TLS settings: the CA to trust and, for mutual TLS, the client's certificate and key.
#[derive(Clone, Debug, Default)]
pub struct TlsOptions {
    /// PEM of the CA that signed the server's certificate; `None`: the system's roots.
    pub ca_pem: Option<Vec<u8>>,
    /// PEM certificate chain of this client (mutual TLS), with `key_pem`.
    pub cert_pem: Option<Vec<u8>>,
    /// PEM private key of this client (mutual TLS), with `cert_pem`.
    pub key_pem: Option<Vec<u8>>,
    /// The name to verify in the server's certificate, when it differs from the target's
    /// host (e.g. connecting by IP).
    pub server_name: Option<String>,
}

impl TlsOptions {
    /// Trusts the CA in the PEM file at `path`.
    pub fn ca_file(path: impl AsRef<Path>) -> Result<TlsOptions, Error> {
        Ok(TlsOptions {
            ca_pem: Some(std::fs::read(path)?),
            ..TlsOptions::default()
        })
    }

    /// Adds a client certificate and key (PEM files) for mutual TLS.
    pub fn identity_files(
        mut self,
        cert: impl AsRef<Path>,
        key: impl AsRef<Path>,
    ) -> Result<TlsOptions, Error> {
        self.cert_pem = Some(std::fs::read(cert)?);
        self.key_pem = Some(std::fs::read(key)?);
        Ok(self)
    }
}

/// A retry policy's backoff between failed attempts.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Backoff {
    /// The same `delay` before every retry.
    Fixed {
        /// The wait.
        delay: Duration,
    },
    /// `delay * 2^(attempt-1)`, capped at `max_delay` (None: the server's cap), with a
    /// random `jitter` fraction (0.0 to 1.0).
    Exponential {
        /// The first wait.
        delay: Duration,
        /// The largest wait.
        max_delay: Option<Duration>,
        /// The random share of each wait.
        jitter: f64,
    },
}

impl Backoff {
    fn to_pb(self) -> pb::Backoff {
        match self {
            Backoff::Fixed { delay } => pb::Backoff {
                kind: pb::BackoffKind::Fixed as i32,
                delay: Some(pb_duration(delay)),
                ..Default::default()
            },
            Backoff::Exponential {
                delay,
                max_delay,
                jitter,
            } => pb::Backoff {
                kind: pb::BackoffKind::Exponential as i32,
                delay: Some(pb_duration(delay)),
                max_delay: max_delay.map(pb_duration),
                jitter,
            },
        }
    }
}

/// The options of an Enqueue; every field is optional (`..Default::default()`).
#[derive(Clone, Debug, Default)]
pub struct EnqueueOptions {
    /// The job's id, unique in its queue: the idempotency key of Enqueue (a second enqueue
    /// with the same id returns the existing job). `None`: the server makes one up.
    pub job_id: Option<String>,
    /// Not leased before this long from now.
    pub delay: Option<Duration>,
    /// Higher first (default 0).
    pub priority: i32,
    /// Attempts before the job is dead-lettered (`None`: the queue's default).
    pub max_attempts: Option<u32>,
    /// The wait between attempts (`None`: the queue's default).
    pub backoff: Option<Backoff>,
    /// Free-form string pairs, handed to the worker.
    pub metadata: HashMap<String, String>,
    /// Each attempt's time limit (`None`: the queue's default).
    pub timeout: Option<Duration>,
    /// The job's group (a tenant, a customer; 1-128 bytes of UTF-8 without control
    /// characters). Within a queue the groups with waiting jobs are leased round-robin
    /// (weighted), each may have its own concurrency and rate limit
    /// ([`super::Client::update_group_config`]), and a worker's
    /// [`crate::JobError::rate_limited_group`] pauses only the job's group. `None`: the
    /// queue's default group.
    pub group_key: Option<String>,
    /// A job not leased by this time moves to EXPIRED (or to the dead-letter queue with
    /// reason EXPIRED when the queue's `dead_letter_expired` is set) and never runs. At most
    /// one of `expire_at` and `ttl`.
    pub expire_at: Option<SystemTime>,
    /// `expire_at` relative to the enqueue (1 ms to 365 days), by the server's clock.
    pub ttl: Option<Duration>,
}

/// One job of [`super::Client::enqueue_batch`].
#[derive(Clone, Debug)]
pub struct NewJob {
    /// The queue.
    pub queue: String,
    /// The job's name (selects the worker's handler).
    pub name: String,
    /// Its payload.
    pub payload: Payload,
    /// Its options.
    pub options: EnqueueOptions,
}

impl NewJob {
    /// A job for [`super::Client::enqueue_batch`].
    pub fn new(
        queue: &str,
        name: &str,
        payload: impl Into<Payload>,
        options: EnqueueOptions,
    ) -> NewJob {
        NewJob {
            queue: queue.into(),
            name: name.into(),
            payload: payload.into(),
            options,
        }
    }

    pub(crate) fn into_spec(self) -> pb::JobSpec {
        let o = self.options;
        pb::JobSpec {
            queue: self.queue,
            job_id: o.job_id.unwrap_or_default(),
            name: self.name,
            payload: self.payload.bytes,
            content_type: self.payload.content_type,
            metadata: o.metadata,
            delay: o.delay.map(pb_duration),
            priority: o.priority,
            max_attempts: o.max_attempts,
            backoff: o.backoff.map(Backoff::to_pb),
            timeout: o.timeout.map(pb_duration),
            group_key: o.group_key.unwrap_or_default(),
            expire_time: o.expire_at.map(prost_types::Timestamp::from),
            ttl: o.ttl.map(pb_duration),
        }
    }
}
