//! The JSON and YAML shapes of the CLI's output: the script interface, documented in
//! docs/cli.md and kept stable (fields are added, never renamed or removed).
//!
//! Rules: field names are the proto's (snake_case); every field is always present (`null`
//! when unset); times are RFC 3339 UTC strings with milliseconds; durations are numbers of
//! seconds (fractions allowed); enums are the proto value without its prefix, lowercase
//! (`JOB_STATE_DEAD` -> `"dead"`); a payload is text when its bytes are UTF-8
//! (`payload_encoding: "utf8"`), else base64 (`"base64"`); maps are sorted by key.

use std::collections::BTreeMap;

use base64::Engine;
use jobwire_client::pb;
use serde::Serialize;

use super::time::{rfc3339, seconds};

/// A job (GetJob, GetDeadLetter, ListDeadLetters, Enqueue).
#[derive(Debug, Serialize)]
pub struct JobView {
    pub queue: String,
    pub job_id: String,
    pub name: String,
    /// `waiting`, `delayed`, `active`, `completed`, `dead`, `cancelled`, `expired`.
    pub state: String,
    /// `utf8` (payload is the text) or `base64`.
    pub payload_encoding: &'static str,
    pub payload: String,
    pub content_type: String,
    pub metadata: BTreeMap<String, String>,
    pub priority: i32,
    pub max_attempts: u32,
    pub attempts_made: u32,
    pub replays: u32,
    pub backoff: Option<BackoffView>,
    /// Seconds.
    pub timeout: Option<f64>,
    /// `no_retry`, `attempts_exhausted`, `lease_expired`, `timed_out`, `expired`; null
    /// unless dead.
    pub dead_reason: Option<String>,
    pub errors: Vec<AttemptErrorView>,
    pub errors_dropped: u64,
    pub create_time: Option<String>,
    pub ready_time: Option<String>,
    pub lease_time: Option<String>,
    pub finish_time: Option<String>,
    pub idempotency_key: String,
    /// "" for the queue's default group.
    pub group_key: String,
    pub expire_time: Option<String>,
    pub cancel_time: Option<String>,
    pub cancel_reason: String,
    /// 0-100.
    pub progress: u32,
    pub progress_message: String,
    pub progress_time: Option<String>,
    /// `utf8` or `base64`, as the payload.
    pub checkpoint_encoding: &'static str,
    pub checkpoint: String,
    /// `utf8` or `base64`, as the payload.
    pub result_encoding: &'static str,
    pub result: String,
    /// ACTIVE only.
    pub lease_deadline: Option<String>,
    /// ACTIVE only: the worker holding the lease.
    pub worker_id: String,
}

/// Bytes as text when they are UTF-8 (`utf8`), else base64 (`base64`).
fn text_or_base64(b: &[u8]) -> (&'static str, String) {
    match std::str::from_utf8(b) {
        Ok(s) => ("utf8", s.to_owned()),
        Err(_) => (
            "base64",
            base64::engine::general_purpose::STANDARD.encode(b),
        ),
    }
}

/// One failed attempt.
#[derive(Debug, Serialize)]
pub struct AttemptErrorView {
    pub attempt: u32,
    pub error_type: String,
    pub message: String,
    pub details: String,
    pub worker_id: String,
    pub fail_time: Option<String>,
    /// `retry`, `no_retry`, `rate_limited` (null when unspecified).
    pub disposition: Option<String>,
    /// Seconds.
    pub retry_delay: Option<f64>,
}

/// A backoff policy.
#[derive(Debug, Serialize)]
pub struct BackoffView {
    /// `fixed`, `exponential` (null when unspecified).
    pub kind: Option<String>,
    /// Seconds.
    pub delay: Option<f64>,
    pub jitter: f64,
    /// Seconds.
    pub max_delay: Option<f64>,
}

/// A queue's numbers and config (ListQueues, GetQueueStats).
#[derive(Debug, Serialize)]
pub struct QueueStatsView {
    pub queue: String,
    pub waiting: u64,
    pub delayed: u64,
    pub active: u64,
    pub completed: u64,
    pub dead: u64,
    pub cancelled: u64,
    pub expired: u64,
    /// Groups with waiting jobs.
    pub groups_waiting: u64,
    /// Seconds.
    pub oldest_waiting_age: f64,
    /// Seconds.
    pub oldest_dead_age: f64,
    pub paused: bool,
    pub workers_connected: u32,
    pub config: QueueConfigView,
}

/// A queue's config (GetQueueConfig, UpdateQueueConfig).
#[derive(Debug, Serialize)]
pub struct QueueConfigView {
    pub default_max_attempts: Option<u32>,
    pub default_backoff: Option<BackoffView>,
    /// Seconds.
    pub default_timeout: Option<f64>,
    pub retention: Option<RetentionView>,
    pub rate_limit: Option<RateLimitView>,
    pub max_active: Option<u32>,
    pub group_max_active: Option<u32>,
    pub group_rate_limit: Option<RateLimitView>,
    /// Seconds.
    pub cancel_grace: Option<f64>,
    pub dead_letter_expired: bool,
}

/// Retention of finished jobs.
#[derive(Debug, Serialize)]
pub struct RetentionView {
    pub keep_completed: Option<u32>,
    /// Seconds.
    pub completed_max_age: Option<f64>,
    pub keep_dead: Option<u32>,
    /// Seconds.
    pub dead_max_age: Option<f64>,
}

/// A queue's rate limit.
#[derive(Debug, Serialize)]
pub struct RateLimitView {
    pub max: u32,
    /// Seconds.
    pub period: Option<f64>,
}

/// One worker stream on one replica (ListWorkers).
#[derive(Debug, Serialize)]
pub struct WorkerStreamView {
    pub replica_id: String,
    pub stream_id: String,
    pub worker_id: String,
    pub queues: Vec<String>,
    pub credits: u32,
    pub held_leases: u32,
    /// At most 100 (held_leases counts them all).
    pub leases: Vec<HeldLeaseView>,
    pub connect_time: Option<String>,
    pub last_heard_time: Option<String>,
    pub draining: bool,
}

/// A lease a worker stream holds.
#[derive(Debug, Serialize)]
pub struct HeldLeaseView {
    pub queue: String,
    pub job_id: String,
}

/// A replica that reported its streams (ListWorkers).
#[derive(Debug, Serialize)]
pub struct ReplicaView {
    pub replica_id: String,
    pub snapshot_time: Option<String>,
    pub answered: bool,
}

impl From<&pb::WorkerStream> for WorkerStreamView {
    fn from(w: &pb::WorkerStream) -> WorkerStreamView {
        WorkerStreamView {
            replica_id: w.replica_id.clone(),
            stream_id: w.stream_id.clone(),
            worker_id: w.worker_id.clone(),
            queues: w.queues.clone(),
            credits: w.credits,
            held_leases: w.held_leases,
            leases: w
                .leases
                .iter()
                .map(|l| HeldLeaseView {
                    queue: l.queue.clone(),
                    job_id: l.job_id.clone(),
                })
                .collect(),
            connect_time: rfc3339(w.connect_time.as_ref()),
            last_heard_time: rfc3339(w.last_heard_time.as_ref()),
            draining: w.draining,
        }
    }
}

impl From<&pb::Replica> for ReplicaView {
    fn from(r: &pb::Replica) -> ReplicaView {
        ReplicaView {
            replica_id: r.replica_id.clone(),
            snapshot_time: rfc3339(r.snapshot_time.as_ref()),
            answered: r.answered,
        }
    }
}

/// `pb` enum name -> lowercase without the prefix (`JOB_STATE_DEAD` -> `dead`).
fn enum_name(full: &str, prefix: &str) -> String {
    full.strip_prefix(prefix)
        .unwrap_or(full)
        .to_ascii_lowercase()
}

/// The state of a job as printed.
pub fn state_name(state: i32) -> String {
    match pb::JobState::try_from(state) {
        Ok(pb::JobState::Unspecified) | Err(_) => "unspecified".into(),
        Ok(s) => enum_name(s.as_str_name(), "JOB_STATE_"),
    }
}

/// The dead reason as printed (`None` unless dead).
pub fn reason_name(reason: i32) -> Option<String> {
    match pb::DeadReason::try_from(reason) {
        Ok(pb::DeadReason::Unspecified) | Err(_) => None,
        Ok(r) => Some(enum_name(r.as_str_name(), "DEAD_REASON_")),
    }
}

impl From<&pb::Backoff> for BackoffView {
    fn from(b: &pb::Backoff) -> BackoffView {
        BackoffView {
            kind: match pb::BackoffKind::try_from(b.kind) {
                Ok(pb::BackoffKind::Unspecified) | Err(_) => None,
                Ok(k) => Some(enum_name(k.as_str_name(), "BACKOFF_KIND_")),
            },
            delay: seconds(b.delay.as_ref()),
            jitter: b.jitter,
            max_delay: seconds(b.max_delay.as_ref()),
        }
    }
}

impl From<&pb::AttemptError> for AttemptErrorView {
    fn from(e: &pb::AttemptError) -> AttemptErrorView {
        AttemptErrorView {
            attempt: e.attempt,
            error_type: e.error_type.clone(),
            message: e.message.clone(),
            details: e.details.clone(),
            worker_id: e.worker_id.clone(),
            fail_time: rfc3339(e.fail_time.as_ref()),
            disposition: match pb::FailDisposition::try_from(e.disposition) {
                Ok(pb::FailDisposition::Unspecified) | Err(_) => None,
                Ok(d) => Some(enum_name(d.as_str_name(), "FAIL_DISPOSITION_")),
            },
            retry_delay: seconds(e.retry_delay.as_ref()),
        }
    }
}

impl From<&pb::Job> for JobView {
    fn from(j: &pb::Job) -> JobView {
        let (payload_encoding, payload) = text_or_base64(&j.payload);
        let (checkpoint_encoding, checkpoint) = text_or_base64(&j.checkpoint);
        let (result_encoding, result) = text_or_base64(&j.result);
        JobView {
            queue: j.queue.clone(),
            job_id: j.job_id.clone(),
            name: j.name.clone(),
            state: state_name(j.state),
            payload_encoding,
            payload,
            content_type: j.content_type.clone(),
            metadata: j
                .metadata
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            priority: j.priority,
            max_attempts: j.max_attempts,
            attempts_made: j.attempts_made,
            replays: j.replays,
            backoff: j.backoff.as_ref().map(BackoffView::from),
            timeout: seconds(j.timeout.as_ref()),
            dead_reason: reason_name(j.dead_reason),
            errors: j.errors.iter().map(AttemptErrorView::from).collect(),
            errors_dropped: j.errors_dropped,
            create_time: rfc3339(j.create_time.as_ref()),
            ready_time: rfc3339(j.ready_time.as_ref()),
            lease_time: rfc3339(j.lease_time.as_ref()),
            finish_time: rfc3339(j.finish_time.as_ref()),
            idempotency_key: j.idempotency_key.clone(),
            group_key: j.group_key.clone(),
            expire_time: rfc3339(j.expire_time.as_ref()),
            cancel_time: rfc3339(j.cancel_time.as_ref()),
            cancel_reason: j.cancel_reason.clone(),
            progress: j.progress,
            progress_message: j.progress_message.clone(),
            progress_time: rfc3339(j.progress_time.as_ref()),
            checkpoint_encoding,
            checkpoint,
            result_encoding,
            result,
            lease_deadline: rfc3339(j.lease_deadline.as_ref()),
            worker_id: j.worker_id.clone(),
        }
    }
}

impl From<&pb::QueueConfig> for QueueConfigView {
    fn from(c: &pb::QueueConfig) -> QueueConfigView {
        QueueConfigView {
            default_max_attempts: c.default_max_attempts,
            default_backoff: c.default_backoff.as_ref().map(BackoffView::from),
            default_timeout: seconds(c.default_timeout.as_ref()),
            retention: c.retention.as_ref().map(|r| RetentionView {
                keep_completed: r.keep_completed,
                completed_max_age: seconds(r.completed_max_age.as_ref()),
                keep_dead: r.keep_dead,
                dead_max_age: seconds(r.dead_max_age.as_ref()),
            }),
            rate_limit: c.rate_limit.as_ref().map(|r| RateLimitView {
                max: r.max,
                period: seconds(r.period.as_ref()),
            }),
            max_active: c.max_active,
            group_max_active: c.group_max_active,
            group_rate_limit: c.group_rate_limit.as_ref().map(|r| RateLimitView {
                max: r.max,
                period: seconds(r.period.as_ref()),
            }),
            cancel_grace: seconds(c.cancel_grace.as_ref()),
            dead_letter_expired: c.dead_letter_expired,
        }
    }
}

impl From<&pb::QueueStats> for QueueStatsView {
    fn from(s: &pb::QueueStats) -> QueueStatsView {
        QueueStatsView {
            queue: s.queue.clone(),
            waiting: s.waiting,
            delayed: s.delayed,
            active: s.active,
            completed: s.completed,
            dead: s.dead,
            cancelled: s.cancelled,
            expired: s.expired,
            groups_waiting: s.groups_waiting,
            oldest_waiting_age: seconds(s.oldest_waiting_age.as_ref()).unwrap_or(0.0),
            oldest_dead_age: seconds(s.oldest_dead_age.as_ref()).unwrap_or(0.0),
            paused: s.paused,
            workers_connected: s.workers_connected,
            config: QueueConfigView::from(&s.config.unwrap_or_default()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_serializes_with_proto_names_rfc3339_times_seconds_and_text_or_base64() {
        let job = pb::Job {
            queue: "emails".into(),
            job_id: "j1".into(),
            name: "send".into(),
            payload: br#"{"to":"ada"}"#.to_vec(),
            state: pb::JobState::Dead as i32,
            dead_reason: pb::DeadReason::NoRetry as i32,
            timeout: Some(prost_types::Duration {
                seconds: 1,
                nanos: 500_000_000,
            }),
            create_time: Some(prost_types::Timestamp {
                seconds: 1_764_645_600,
                nanos: 0,
            }),
            errors: vec![pb::AttemptError {
                attempt: 1,
                error_type: "smtp_timeout".into(),
                disposition: pb::FailDisposition::NoRetry as i32,
                ..Default::default()
            }],
            ..Default::default()
        };
        let v = serde_json::to_value(JobView::from(&job)).expect("json");
        assert_eq!(v["state"], "dead");
        assert_eq!(v["dead_reason"], "no_retry");
        assert_eq!(v["payload_encoding"], "utf8");
        assert_eq!(v["payload"], r#"{"to":"ada"}"#);
        assert_eq!(v["timeout"], 1.5);
        assert_eq!(v["create_time"], "2025-12-02T03:20:00.000Z");
        assert_eq!(v["ready_time"], serde_json::Value::Null);
        assert_eq!(v["errors"][0]["disposition"], "no_retry");
        let bin = pb::Job {
            payload: vec![0xff, 0x00],
            ..job
        };
        let v = serde_json::to_value(JobView::from(&bin)).expect("json");
        assert_eq!(v["payload_encoding"], "base64");
        assert_eq!(v["payload"], "/wA=");
    }
}
