//! Protobuf <-> domain. `TryFrom`-style functions validate every field of a request and name
//! the field and the limit in the error; `From`-style ones build responses.

use std::collections::BTreeMap;

use super::limits::*;
use super::pb;
use crate::jobs::{
    Backoff, BackoffKind, DeadFilter, DeadReason, Disposition, JobState, NewJob, QueueName,
};
use crate::Error;

mod outbound;

pub(crate) use outbound::{backoff_pb, dead_reason_pb, duration, job_pb, state_pb, timestamp};

/// Server-side settings the conversion needs.
#[derive(Clone, Debug)]
pub struct ApiLimits {
    /// Largest payload, bytes.
    pub max_payload_bytes: usize,
    /// max_attempts when a job does not set it.
    pub default_max_attempts: u32,
    /// Largest checkpoint (ReportProgress), bytes.
    pub max_checkpoint_bytes: usize,
    /// Largest result (Ack), bytes.
    pub max_result_bytes: usize,
}

impl Default for ApiLimits {
    /// The server's defaults (`--max-payload-bytes` and friends).
    fn default() -> Self {
        ApiLimits {
            max_payload_bytes: 1 << 20,
            default_max_attempts: 1,
            max_checkpoint_bytes: DEFAULT_MAX_DATA_BYTES,
            max_result_bytes: DEFAULT_MAX_DATA_BYTES,
        }
    }
}

pub(crate) fn queue(field: &str, name: &str) -> Result<QueueName, Error> {
    QueueName::parse(name).map_err(|reason| Error::invalid(field, reason))
}

fn bounded(field: &str, s: &str, max: usize) -> Result<(), Error> {
    if s.len() > max {
        return Err(Error::invalid(
            field,
            format!("is {} bytes, the limit is {max}", s.len()),
        ));
    }
    Ok(())
}

pub(crate) fn job_id(field: &str, id: &str) -> Result<String, Error> {
    if id.is_empty() {
        return Err(Error::invalid(field, "must not be empty"));
    }
    bounded(field, id, MAX_JOB_ID_BYTES)?;
    Ok(id.to_owned())
}

/// The most bytes of a group key (JobSpec.group_key, GroupService).
pub(crate) const MAX_GROUP_KEY_BYTES: usize = 128;

/// A group key: empty (the queue's default group) when `allow_empty`, else 1 to
/// [`MAX_GROUP_KEY_BYTES`] bytes of UTF-8 without control characters (the Lua scripts use
/// NUL and 0x01 as separators in their group records, `store/scripts/groups.lua`).
pub(crate) fn group_key(field: &str, g: &str, allow_empty: bool) -> Result<String, Error> {
    if g.is_empty() && !allow_empty {
        return Err(Error::invalid(field, "must not be empty"));
    }
    bounded(field, g, MAX_GROUP_KEY_BYTES)?;
    if let Some(c) = g.chars().find(|c| c.is_control()) {
        return Err(Error::invalid(
            field,
            format!("holds the control character {c:?}; control characters are not allowed"),
        ));
    }
    Ok(g.to_owned())
}

pub(crate) fn token(field: &str, t: &str) -> Result<String, Error> {
    if t.is_empty() {
        return Err(Error::invalid(field, "must not be empty"));
    }
    bounded(field, t, MAX_TOKEN_BYTES)?;
    Ok(t.to_owned())
}

/// A Duration as ms within `0..=max_ms`; `None` when unset.
pub(crate) fn duration_ms(
    field: &str,
    d: Option<&prost_types::Duration>,
    max_ms: u64,
) -> Result<Option<u64>, Error> {
    let Some(d) = d else { return Ok(None) };
    if d.seconds < 0 || d.nanos < 0 || d.nanos >= 1_000_000_000 {
        return Err(Error::invalid(
            field,
            "must be a non-negative duration (seconds >= 0, 0 <= nanos < 1e9)",
        ));
    }
    let ms = (d.seconds as u128) * 1000 + (d.nanos as u128) / 1_000_000;
    if ms > u128::from(max_ms) {
        return Err(Error::invalid(
            field,
            format!("is {ms} ms, the limit is {max_ms} ms"),
        ));
    }
    Ok(Some(ms as u64))
}

pub(crate) fn backoff(field: &str, b: &pb::Backoff) -> Result<Backoff, Error> {
    let kind = match pb::BackoffKind::try_from(b.kind) {
        Ok(pb::BackoffKind::Fixed) => BackoffKind::Fixed,
        Ok(pb::BackoffKind::Exponential) => BackoffKind::Exponential,
        _ => {
            return Err(Error::invalid(
                format!("{field}.kind"),
                "must be BACKOFF_KIND_FIXED or BACKOFF_KIND_EXPONENTIAL",
            ))
        }
    };
    if !(0.0..=1.0).contains(&b.jitter) {
        return Err(Error::invalid(
            format!("{field}.jitter"),
            format!("is {}, must be in [0, 1]", b.jitter),
        ));
    }
    Ok(Backoff {
        kind,
        delay_ms: duration_ms(&format!("{field}.delay"), b.delay.as_ref(), MAX_BACKOFF_MS)?
            .unwrap_or(0),
        jitter: b.jitter,
        max_delay_ms: duration_ms(
            &format!("{field}.max_delay"),
            b.max_delay.as_ref(),
            MAX_BACKOFF_MS,
        )?
        .unwrap_or(0),
    })
}

fn metadata(
    field: &str,
    m: &std::collections::HashMap<String, String>,
) -> Result<BTreeMap<String, String>, Error> {
    if m.len() > MAX_METADATA_ENTRIES {
        return Err(Error::invalid(
            field,
            format!(
                "has {} entries, the limit is {MAX_METADATA_ENTRIES}",
                m.len()
            ),
        ));
    }
    for (k, v) in m {
        if k.is_empty() {
            return Err(Error::invalid(field, "keys must not be empty"));
        }
        bounded(&format!("{field}[{k:?}] key"), k, MAX_METADATA_KEY_BYTES)?;
        bounded(&format!("{field}[{k:?}]"), v, MAX_METADATA_VALUE_BYTES)?;
    }
    Ok(m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
}

/// Validates a JobSpec (`field` is its path, e.g. `job` or `jobs[3]`).
pub(crate) fn new_job(
    field: &str,
    spec: &pb::JobSpec,
    limits: &ApiLimits,
) -> Result<NewJob, Error> {
    // Field names are built only for an error or a nested check: a valid job (the hot
    // path of Enqueue) formats none.
    let f = |name: &str| format!("{field}.{name}");
    let queue =
        QueueName::parse(&spec.queue).map_err(|reason| Error::invalid(f("queue"), reason))?;
    let id_ours = spec.job_id.is_empty();
    let id = if id_ours {
        uuid::Uuid::now_v7().to_string()
    } else if spec.job_id.len() > MAX_JOB_ID_BYTES {
        // Refused, naming the field and the limit.
        job_id(&f("job_id"), &spec.job_id)?
    } else {
        spec.job_id.clone()
    };
    if spec.name.is_empty() {
        return Err(Error::invalid(f("name"), "must not be empty"));
    }
    if spec.name.len() > MAX_NAME_BYTES {
        bounded(&f("name"), &spec.name, MAX_NAME_BYTES)?;
    }
    super::limits::printable(&f("name"), &spec.name)?;
    if spec.payload.len() > limits.max_payload_bytes {
        return Err(Error::TooLarge {
            field: f("payload"),
            reason: format!(
                "is {} bytes, the limit is {} bytes",
                spec.payload.len(),
                limits.max_payload_bytes
            ),
        });
    }
    if spec.content_type.len() > MAX_CONTENT_TYPE_BYTES {
        bounded(
            &f("content_type"),
            &spec.content_type,
            MAX_CONTENT_TYPE_BYTES,
        )?;
    }
    if !PRIORITY_RANGE.contains(&spec.priority) {
        return Err(Error::invalid(
            f("priority"),
            format!("is {}, must be in [-1000, 1000]", spec.priority),
        ));
    }
    let max_attempts = spec.max_attempts;
    if let Some(m) = max_attempts.filter(|m| !MAX_ATTEMPTS_RANGE.contains(m)) {
        return Err(Error::invalid(
            f("max_attempts"),
            format!("is {m}, must be in [1, 1000]"),
        ));
    }
    let timeout_ms = match &spec.timeout {
        None => None,
        Some(t) => duration_ms(&f("timeout"), Some(t), MAX_BACKOFF_MS)?,
    };
    if timeout_ms == Some(0) {
        return Err(Error::invalid(
            f("timeout"),
            "must be at least 1 ms when set",
        ));
    }
    let metadata = if spec.metadata.is_empty() {
        BTreeMap::new()
    } else {
        metadata(&f("metadata"), &spec.metadata)?
    };
    let delay_ms = match &spec.delay {
        None => 0,
        Some(d) => duration_ms(&f("delay"), Some(d), MAX_DELAY_MS)?.unwrap_or(0),
    };
    let group_key = if spec.group_key.is_empty() {
        String::new()
    } else {
        group_key(&f("group_key"), &spec.group_key, true)?
    };
    let expire_ms = if spec.expire_time.is_none() && spec.ttl.is_none() {
        0
    } else {
        expire_ms(field, spec)?
    };
    Ok(NewJob {
        queue,
        id,
        name: spec.name.clone(),
        payload: spec.payload.clone(),
        content_type: spec.content_type.clone(),
        metadata,
        delay_ms,
        priority: spec.priority,
        max_attempts,
        backoff: spec
            .backoff
            .as_ref()
            .map(|b| backoff(&f("backoff"), b))
            .transpose()?,
        timeout_ms,
        group_key,
        expire_ms,
        id_ours,
    })
}

/// Longest `ttl` of a job: 365 days.
const MAX_TTL_MS: u64 = 365 * 24 * 3600 * 1000;

/// When a job expires unless leased by then, ms since the epoch (0: never), from its
/// `expire_time` or `ttl` (at most one; ttl 1 ms to 365 days; an expire_time must be in
/// the future). INVALID_ARGUMENT naming the field otherwise.
fn expire_ms(field: &str, spec: &pb::JobSpec) -> Result<u64, Error> {
    let f = |name: &str| format!("{field}.{name}");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    match (spec.expire_time.as_ref(), spec.ttl.as_ref()) {
        (Some(_), Some(_)) => Err(Error::invalid(
            f("ttl"),
            "must not be set together with expire_time (give one of them)",
        )),
        (Some(t), None) => {
            let at = timestamp_ms(&f("expire_time"), Some(t))?.unwrap_or(0);
            if at <= now {
                return Err(Error::invalid(f("expire_time"), "must be in the future"));
            }
            Ok(at)
        }
        (None, Some(d)) => match duration_ms(&f("ttl"), Some(d), MAX_TTL_MS)? {
            Some(0) | None => Err(Error::invalid(
                f("ttl"),
                format!("must be 1 ms to {MAX_TTL_MS} ms (365 days)"),
            )),
            Some(ms) => Ok(now + ms),
        },
        (None, None) => Ok(0),
    }
}

/// Validates a worker's JobError: the type must fit its limit (it is matched by filters);
/// the message and details are cut to theirs ([`truncated`]), so an oversized text still
/// records the failure instead of leaving the attempt to expire.
pub(crate) fn job_error(
    field: &str,
    e: Option<&pb::JobError>,
) -> Result<(String, String, String), Error> {
    let Some(e) = e else {
        return Ok((String::new(), String::new(), String::new()));
    };
    bounded(
        &format!("{field}.error_type"),
        &e.error_type,
        MAX_ERROR_TYPE_BYTES,
    )?;
    super::limits::printable(&format!("{field}.error_type"), &e.error_type)?;
    Ok((
        truncated(&e.message, MAX_ERROR_MESSAGE_BYTES),
        e.error_type.clone(),
        truncated(&e.details, MAX_ERROR_DETAILS_BYTES),
    ))
}

/// `s` when it fits in `max` bytes; otherwise its longest prefix that ends on a UTF-8 char
/// boundary and leaves room for the marker `…[truncated N bytes]` (N = bytes removed), then
/// the marker: at most `max` bytes in all. `max` must leave room for a marker (≥ 64).
pub(crate) fn truncated(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let marker = |removed: usize| format!("…[truncated {removed} bytes]");
    // The marker's length depends on N, N on where the cut falls: start from the smallest N
    // (s cut at `max`) and move the cut back until prefix + marker fit (a few rounds at most).
    let mut keep = max.saturating_sub(marker(s.len() - max).len());
    loop {
        while !s.is_char_boundary(keep) {
            keep -= 1;
        }
        let m = marker(s.len() - keep);
        if keep + m.len() <= max {
            return format!("{}{m}", &s[..keep]);
        }
        keep -= 1;
    }
}

pub(crate) fn disposition(field: &str, d: i32) -> Result<Disposition, Error> {
    match pb::FailDisposition::try_from(d) {
        Ok(pb::FailDisposition::Unspecified | pb::FailDisposition::Retry) => Ok(Disposition::Retry),
        Ok(pb::FailDisposition::NoRetry) => Ok(Disposition::NoRetry),
        Ok(pb::FailDisposition::RateLimited) => Ok(Disposition::RateLimited),
        Ok(pb::FailDisposition::Release) => Ok(Disposition::Release),
        Err(_) => Err(Error::invalid(field, format!("unknown value {d}"))),
    }
}

pub(crate) fn dead_filter(field: &str, f: &pb::DeadLetterFilter) -> Result<DeadFilter, Error> {
    let reason = match pb::DeadReason::try_from(f.reason) {
        Ok(pb::DeadReason::Unspecified) => None,
        Ok(r) => Some(dead_reason_from_pb(r)),
        Err(_) => {
            return Err(Error::invalid(
                format!("{field}.reason"),
                format!("unknown value {}", f.reason),
            ))
        }
    };
    bounded(&format!("{field}.job_name"), &f.job_name, MAX_NAME_BYTES)?;
    bounded(
        &format!("{field}.error_type"),
        &f.error_type,
        MAX_ERROR_TYPE_BYTES,
    )?;
    bounded(
        &format!("{field}.error_message_prefix"),
        &f.error_message_prefix,
        MAX_ERROR_MESSAGE_BYTES,
    )?;
    let ts = |name: &str, t: Option<&prost_types::Timestamp>| -> Result<Option<u64>, Error> {
        t.map(|t| {
            if t.seconds < 0 || t.nanos < 0 {
                Err(Error::invalid(
                    format!("{field}.{name}"),
                    "must not be before 1970",
                ))
            } else {
                Ok(t.seconds as u64 * 1000 + t.nanos as u64 / 1_000_000)
            }
        })
        .transpose()
    };
    Ok(DeadFilter {
        job_name: f.job_name.clone(),
        error_type: f.error_type.clone(),
        reason,
        error_message_prefix: f.error_message_prefix.clone(),
        dead_after_ms: ts("dead_after", f.dead_after.as_ref())?,
        dead_before_ms: ts("dead_before", f.dead_before.as_ref())?,
    })
}

fn dead_reason_from_pb(r: pb::DeadReason) -> DeadReason {
    match r {
        pb::DeadReason::NoRetry => DeadReason::NoRetry,
        pb::DeadReason::LeaseExpired => DeadReason::LeaseExpired,
        pb::DeadReason::TimedOut => DeadReason::TimedOut,
        pb::DeadReason::Expired => DeadReason::Expired,
        pb::DeadReason::AttemptsExhausted | pb::DeadReason::Unspecified => {
            DeadReason::AttemptsExhausted
        }
    }
}

/// A Timestamp as ms since the epoch; `None` when unset; INVALID_ARGUMENT naming `field`
/// before 1970 or with nanos out of range.
pub(crate) fn timestamp_ms(
    field: &str,
    t: Option<&prost_types::Timestamp>,
) -> Result<Option<u64>, Error> {
    let Some(t) = t else { return Ok(None) };
    if t.seconds < 0 || !(0..1_000_000_000).contains(&t.nanos) {
        return Err(Error::invalid(
            field,
            "must be a valid time, not before 1970",
        ));
    }
    Ok(Some(
        (t.seconds as u64)
            .saturating_mul(1000)
            .saturating_add(t.nanos as u64 / 1_000_000),
    ))
}

/// A requested job state; INVALID_ARGUMENT naming `field` for UNSPECIFIED or an unknown
/// value.
pub(crate) fn job_state(field: &str, s: i32) -> Result<JobState, Error> {
    match pb::JobState::try_from(s) {
        Ok(pb::JobState::Waiting) => Ok(JobState::Waiting),
        Ok(pb::JobState::Delayed) => Ok(JobState::Delayed),
        Ok(pb::JobState::Active) => Ok(JobState::Active),
        Ok(pb::JobState::Completed) => Ok(JobState::Completed),
        Ok(pb::JobState::Dead) => Ok(JobState::Dead),
        Ok(pb::JobState::Cancelled) => Ok(JobState::Cancelled),
        Ok(pb::JobState::Expired) => Ok(JobState::Expired),
        Ok(pb::JobState::Unspecified) => Err(Error::invalid(
            field,
            "is required: WAITING, DELAYED, ACTIVE, COMPLETED, DEAD, CANCELLED or EXPIRED",
        )),
        Err(_) => Err(Error::invalid(
            field,
            format!("unknown value {s}; give WAITING, DELAYED, ACTIVE, COMPLETED, DEAD, CANCELLED or EXPIRED"),
        )),
    }
}

/// A page size: 0 means [`DEFAULT_PAGE_SIZE`]; INVALID_ARGUMENT naming `field` and the
/// limit outside 0..=[`MAX_PAGE_SIZE`].
pub(crate) fn page_size(field: &str, n: i32) -> Result<usize, Error> {
    match n {
        0 => Ok(DEFAULT_PAGE_SIZE as usize),
        n if (1..=MAX_PAGE_SIZE).contains(&n) => Ok(n as usize),
        n => Err(Error::invalid(
            field,
            format!("is {n}, must be 0 (default {DEFAULT_PAGE_SIZE}) to {MAX_PAGE_SIZE}"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::truncated;

    #[test]
    fn truncation_keeps_a_char_boundary_and_counts_removed_bytes() {
        assert_eq!(truncated("short", 64), "short");
        let s = "é".repeat(100); // 200 bytes
        let t = truncated(&s, 64);
        assert!(t.len() <= 64, "{}", t.len());
        let (kept, marker) = t.rsplit_once('…').expect("marker");
        assert!(s.starts_with(kept));
        assert_eq!(marker, format!("[truncated {} bytes]", 200 - kept.len()));
        // The marker's digits grow with N; the result still fits.
        let big = "x".repeat(1_000_000);
        let t = truncated(&big, 100);
        assert_eq!(t.len(), 100);
        assert!(t.ends_with(&format!(
            "[truncated {} bytes]",
            1_000_000 - t.find('…').expect("marker")
        )));
    }
}
