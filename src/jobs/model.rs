//! Job types. Times are milliseconds since the Unix epoch as Redis's clock reads them
//! (scripts take the time from Redis `TIME`, so every replica agrees on one clock).

use std::collections::BTreeMap;

use serde::Deserialize;

use super::QueueName;

/// Where a job is in its life (DESIGN.md section 2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JobState {
    /// Ready to lease.
    Waiting,
    /// Waiting out a delay or a retry backoff.
    Delayed,
    /// Leased to a worker.
    Active,
    /// Acked.
    Completed,
    /// In the dead-letter queue.
    Dead,
    /// Cancelled (CancelJob) before it finished: terminal, kept per the completed retention.
    Cancelled,
    /// Not started before its expire time: terminal, kept per the completed retention.
    Expired,
}

impl JobState {
    /// The state as the scripts store it (`st` field).
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Waiting => "waiting",
            JobState::Delayed => "delayed",
            JobState::Active => "active",
            JobState::Completed => "completed",
            JobState::Dead => "dead",
            JobState::Cancelled => "cancelled",
            JobState::Expired => "expired",
        }
    }

    /// Parses the stored form; `None` for anything else.
    pub fn parse(s: &str) -> Option<JobState> {
        Some(match s {
            "waiting" => JobState::Waiting,
            "delayed" => JobState::Delayed,
            "active" => JobState::Active,
            "completed" => JobState::Completed,
            "dead" => JobState::Dead,
            "cancelled" => JobState::Cancelled,
            "expired" => JobState::Expired,
            _ => return None,
        })
    }
}

/// How the retry delay grows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackoffKind {
    /// Every retry waits the base delay.
    Fixed,
    /// The retry after attempt n waits delay * 2^(n-1), as BullMQ's built-in "exponential".
    Exponential,
}

/// A retry backoff policy: `delay_ms` base, `jitter` in [0, 1] (the delay d is drawn
/// uniformly from [(1 - jitter) * d, d], "full jitter" at 1, after the AWS Architecture Blog's
/// "Exponential Backoff And Jitter"), `max_delay_ms` caps every delay when > 0.
#[derive(Clone, Debug, PartialEq)]
pub struct Backoff {
    /// Fixed or exponential.
    pub kind: BackoffKind,
    /// Base delay, ms.
    pub delay_ms: u64,
    /// Fraction of the delay that is randomised, in [0, 1].
    pub jitter: f64,
    /// Cap on every delay, ms; 0 = no cap.
    pub max_delay_ms: u64,
}

impl Backoff {
    /// The stored form, `kind,delay_ms,jitter,max_delay_ms`, which `backoff_delay` in
    /// `store/scripts/attempts.lua` parses.
    pub fn encode(&self) -> String {
        let kind = match self.kind {
            BackoffKind::Fixed => "fixed",
            BackoffKind::Exponential => "exponential",
        };
        format!(
            "{kind},{},{},{}",
            self.delay_ms, self.jitter, self.max_delay_ms
        )
    }

    /// Parses the stored form; `None` for "" (no backoff) or anything malformed.
    pub fn decode(s: &str) -> Option<Backoff> {
        let mut parts = s.split(',');
        let kind = match parts.next()? {
            "fixed" => BackoffKind::Fixed,
            "exponential" => BackoffKind::Exponential,
            _ => return None,
        };
        let delay_ms = parts.next()?.parse().ok()?;
        let jitter = parts.next()?.parse().ok()?;
        let max_delay_ms = parts.next()?.parse().ok()?;
        Some(Backoff {
            kind,
            delay_ms,
            jitter,
            max_delay_ms,
        })
    }
}

/// What a worker says about a failed attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Disposition {
    /// Retry with backoff while attempts remain, else dead (ATTEMPTS_EXHAUSTED).
    Retry,
    /// Permanent: dead now (BullMQ's UnrecoverableError).
    NoRetry,
    /// Back after `retry_after`, without consuming the attempt.
    RateLimited,
    /// Back to waiting at once, without consuming the attempt or recording an error: the
    /// worker stops before its handler finished (its shutdown grace ran out), like the
    /// server's own drain. Never recorded on an attempt.
    Release,
}

impl Disposition {
    /// The stored and script form.
    pub fn as_str(self) -> &'static str {
        match self {
            Disposition::Retry => "RETRY",
            Disposition::NoRetry => "NO_RETRY",
            Disposition::RateLimited => "RATE_LIMITED",
            Disposition::Release => "RELEASE",
        }
    }

    /// Parses the stored form.
    pub fn parse(s: &str) -> Option<Disposition> {
        Some(match s {
            "RETRY" => Disposition::Retry,
            "NO_RETRY" => Disposition::NoRetry,
            "RATE_LIMITED" => Disposition::RateLimited,
            "RELEASE" => Disposition::Release,
            _ => return None,
        })
    }
}

/// Why a job is dead.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeadReason {
    /// Failed with NO_RETRY.
    NoRetry,
    /// The last attempt failed.
    AttemptsExhausted,
    /// The last attempt's lease expired.
    LeaseExpired,
    /// The last attempt ran past the job's timeout.
    TimedOut,
    /// Not started before its expire time, on a queue that dead-letters expired jobs.
    Expired,
}

impl DeadReason {
    /// The stored form, as in the proto enum without its prefix.
    pub fn as_str(self) -> &'static str {
        match self {
            DeadReason::NoRetry => "NO_RETRY",
            DeadReason::AttemptsExhausted => "ATTEMPTS_EXHAUSTED",
            DeadReason::LeaseExpired => "LEASE_EXPIRED",
            DeadReason::TimedOut => "TIMED_OUT",
            DeadReason::Expired => "EXPIRED",
        }
    }

    /// Parses the stored form.
    pub fn parse(s: &str) -> Option<DeadReason> {
        Some(match s {
            "NO_RETRY" => DeadReason::NoRetry,
            "ATTEMPTS_EXHAUSTED" => DeadReason::AttemptsExhausted,
            "LEASE_EXPIRED" => DeadReason::LeaseExpired,
            "TIMED_OUT" => DeadReason::TimedOut,
            "EXPIRED" => DeadReason::Expired,
            _ => return None,
        })
    }
}

/// One failed attempt, as `fail_attempt` in `attempts.lua` records it (JSON, short keys).
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct AttemptError {
    /// The attempt number, 1-based.
    #[serde(rename = "a", default)]
    pub attempt: f64,
    /// The message.
    #[serde(rename = "m", default)]
    pub message: String,
    /// The error type.
    #[serde(rename = "t", default)]
    pub error_type: String,
    /// Free-form details.
    #[serde(rename = "d", default)]
    pub details: String,
    /// The worker that held the lease.
    #[serde(rename = "w", default)]
    pub worker_id: String,
    /// When it failed, ms.
    #[serde(rename = "ts", default)]
    pub fail_ms: f64,
    /// RETRY, NO_RETRY or RATE_LIMITED.
    #[serde(rename = "x", default)]
    pub disposition: String,
    /// The delay chosen before the next attempt, ms.
    #[serde(rename = "rd", default)]
    pub retry_delay_ms: f64,
}

/// A job to create, validated.
#[derive(Clone, Debug)]
pub struct NewJob {
    /// Its queue.
    pub queue: QueueName,
    /// Its id: client-chosen (any UTF-8, 1-256 bytes) or generated.
    pub id: String,
    /// The job type, 1-128 bytes.
    pub name: String,
    /// Opaque payload bytes.
    pub payload: Vec<u8>,
    /// MIME type of the payload, or "".
    pub content_type: String,
    /// Producer metadata.
    pub metadata: BTreeMap<String, String>,
    /// Delay before the first attempt, ms.
    pub delay_ms: u64,
    /// -1000..=1000, higher first.
    pub priority: i32,
    /// Runs allowed, 1..=1000; `None`: the queue's default, else the server's.
    pub max_attempts: Option<u32>,
    /// Retry backoff; `None`: the queue's default, else retry at once.
    pub backoff: Option<Backoff>,
    /// Per-attempt timeout, ms (0 = none); `None`: the queue's default.
    pub timeout_ms: Option<u64>,
    /// Its group key, 0-128 bytes; "" = the queue's default group.
    pub group_key: String,
    /// When it expires unless started by then, ms since the epoch; 0 = never.
    pub expire_ms: u64,
    /// Whether the server chose `id` (the request had no job_id): the store then remembers
    /// the id for a while, so that a retry of the write never creates the job again after
    /// it is gone (`store/scripts/enqueue.lua`).
    pub id_ours: bool,
}

/// A stored job.
#[derive(Clone, Debug, PartialEq)]
pub struct Job {
    /// Its queue.
    pub queue: QueueName,
    /// Its id.
    pub id: String,
    /// The job type.
    pub name: String,
    /// Payload bytes.
    pub payload: Vec<u8>,
    /// MIME type or "".
    pub content_type: String,
    /// Producer metadata.
    pub metadata: BTreeMap<String, String>,
    /// Current state.
    pub state: JobState,
    /// Priority.
    pub priority: i32,
    /// Runs allowed in the current budget.
    pub max_attempts: u32,
    /// Runs started in the current budget.
    pub attempts_made: u32,
    /// Retry backoff.
    pub backoff: Option<Backoff>,
    /// Per-attempt timeout, ms; 0 = none.
    pub timeout_ms: u64,
    /// Failed attempts, oldest first: the first one and the newest ones kept (at most 10
    /// after the first, within 64 KiB of JSON: `scripts/common.lua`). A leased job carries
    /// only the last one, its details cut to 2 KiB.
    pub errors: Vec<AttemptError>,
    /// Failed attempts removed from `errors` to keep the history bounded (0 in a lease).
    pub errors_dropped: u64,
    /// Set when dead.
    pub dead_reason: Option<DeadReason>,
    /// Enqueue time, ms.
    pub create_ms: u64,
    /// When it became (or becomes) ready, ms; 0 = unknown.
    pub ready_ms: u64,
    /// Last lease time, ms; 0 = never leased.
    pub lease_ms: u64,
    /// Completion or death time, ms; 0 = not finished.
    pub finish_ms: u64,
    /// Stable across attempts and replays.
    pub idempotency_key: String,
    /// Times replayed from the dead-letter queue.
    pub replays: u32,
    /// Its group key; "" = the queue's default group.
    pub group_key: String,
    /// When it expires unless started by then, ms; 0 = never.
    pub expire_ms: u64,
    /// When a cancel was requested, ms; 0 = never (an ACTIVE job with it set has a cancel
    /// pending: its holder was told).
    pub cancel_ms: u64,
    /// What its workers last reported (kept across attempts), with the checkpoint and the
    /// result; see [`JobData`].
    pub data: JobData,
    /// Active only: the lease deadline (the earlier of the lease's and the attempt's), ms;
    /// 0 otherwise or where unknown (a listing).
    pub lease_deadline_ms: u64,
    /// Active only: the worker id of the lease holder; "" otherwise.
    pub worker_id: String,
    /// The reason given with the cancel ("" none, or not read: only GetJob and CancelJob
    /// read it).
    pub cancel_reason: String,
}

/// What a job carries beside its header (`data` hash of `scripts/common.lua`): progress and
/// checkpoint reported by its workers under a lease (`progress.lua`), kept across attempts
/// and replays, and the result attached to its Ack. Empty or 0 when it has none. A lease
/// carries only the checkpoint; a listing only the progress.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct JobData {
    /// The last progress reported, 0-100.
    pub progress: u32,
    /// The message of the last progress report, up to 256 bytes.
    pub progress_message: String,
    /// When the last progress or checkpoint was saved, ms; 0 = never.
    pub progress_ms: u64,
    /// The last checkpoint saved (bounded by `--max-checkpoint-bytes`).
    pub checkpoint: Vec<u8>,
    /// The result attached to its Ack (bounded by `--max-result-bytes`; completed jobs).
    pub result: Vec<u8>,
}

/// A progress report of a leased job (`ReportProgress`): each `None` keeps the last value;
/// an empty checkpoint clears it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProgressReport {
    /// Percent done, 0-100.
    pub progress: Option<u32>,
    /// A short message (up to 256 bytes).
    pub message: Option<String>,
    /// Bytes the next attempt receives in its lease.
    pub checkpoint: Option<Vec<u8>>,
}

/// A job leased to a worker: deliver it with its token and deadline.
#[derive(Clone, Debug)]
pub struct LeasedJob {
    /// The job (state Active).
    pub job: Job,
    /// This attempt's number, 1-based.
    pub attempt: u32,
    /// The fencing token Ack/Fail/ExtendLease must present.
    pub token: String,
    /// Lease deadline, ms.
    pub deadline_ms: u64,
}

/// Selects dead jobs; `None`/empty fields match anything.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DeadFilter {
    /// Exact job name.
    pub job_name: String,
    /// Exact error type of the last attempt.
    pub error_type: String,
    /// Dead reason.
    pub reason: Option<DeadReason>,
    /// Prefix of the last attempt's message.
    pub error_message_prefix: String,
    /// Died at or after, ms.
    pub dead_after_ms: Option<u64>,
    /// Died before, ms.
    pub dead_before_ms: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_round_trips_through_its_stored_form() {
        let b = Backoff {
            kind: BackoffKind::Exponential,
            delay_ms: 50,
            jitter: 0.25,
            max_delay_ms: 1000,
        };
        assert_eq!(b.encode(), "exponential,50,0.25,1000");
        assert_eq!(Backoff::decode(&b.encode()), Some(b));
        assert_eq!(Backoff::decode(""), None);
        assert_eq!(Backoff::decode("linear,1,0,0"), None);
    }

    #[test]
    fn states_reasons_and_dispositions_round_trip() {
        for s in [
            JobState::Waiting,
            JobState::Delayed,
            JobState::Active,
            JobState::Completed,
            JobState::Dead,
        ] {
            assert_eq!(JobState::parse(s.as_str()), Some(s));
        }
        for r in [
            DeadReason::NoRetry,
            DeadReason::AttemptsExhausted,
            DeadReason::LeaseExpired,
            DeadReason::TimedOut,
        ] {
            assert_eq!(DeadReason::parse(r.as_str()), Some(r));
        }
        for d in [
            Disposition::Retry,
            Disposition::NoRetry,
            Disposition::RateLimited,
            Disposition::Release,
        ] {
            assert_eq!(Disposition::parse(d.as_str()), Some(d));
        }
    }

    #[test]
    fn attempt_errors_decode_from_the_scripts_json() {
        let json = r#"[{"a":2,"m":"503 service unavailable","t":"provider_unavailable","d":"","w":"w1","ts":1764480000123,"x":"RETRY","rd":100}]"#;
        let errors: Vec<AttemptError> = serde_json::from_str(json).expect("decodes");
        assert_eq!(errors[0].attempt, 2.0);
        assert_eq!(errors[0].fail_ms, 1_764_480_000_123.0);
        assert_eq!(errors[0].error_type, "provider_unavailable");
    }
}
