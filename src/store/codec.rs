//! Decoding of script replies and job hashes (field names as in `scripts/common.lua`).

use std::collections::BTreeMap;

use redis::Value;

use super::StoreError;
use crate::jobs::{AttemptError, Backoff, DeadReason, Job, JobData, JobState, QueueName};

pub(crate) fn bad(what: &str) -> StoreError {
    StoreError::Decode(format!("unexpected script reply: {what}"))
}

/// The elements of an array reply.
pub(crate) fn array(v: Value) -> Result<Vec<Value>, StoreError> {
    match v {
        Value::Array(items) | Value::Set(items) => Ok(items),
        Value::Nil => Ok(Vec::new()),
        _ => Err(bad("expected an array")),
    }
}

/// A bulk or simple string reply as bytes.
pub(crate) fn bytes(v: Value) -> Result<Vec<u8>, StoreError> {
    match v {
        Value::BulkString(b) => Ok(b),
        Value::SimpleString(s) => Ok(s.into_bytes()),
        Value::Int(i) => Ok(i.to_string().into_bytes()),
        Value::Nil => Ok(Vec::new()),
        _ => Err(bad("expected a string")),
    }
}

/// A string reply (UTF-8).
pub(crate) fn string(v: Value) -> Result<String, StoreError> {
    String::from_utf8(bytes(v)?).map_err(|_| bad("string is not UTF-8"))
}

/// An integer reply, or a string holding one.
pub(crate) fn int(v: Value) -> Result<i64, StoreError> {
    match v {
        Value::Int(i) => Ok(i),
        other => {
            let s = string(other)?;
            s.parse::<i64>()
                .or_else(|_| s.parse::<f64>().map(|f| f as i64))
                .map_err(|_| bad("expected an integer"))
        }
    }
}

/// Pops the front of a reply array.
pub(crate) fn next(items: &mut std::vec::IntoIter<Value>) -> Result<Value, StoreError> {
    items.next().ok_or_else(|| bad("reply too short"))
}

/// Positions of the header values of a job record (the order of `scripts/common.lua`).
mod h {
    pub const ST: usize = 0;
    pub const ATT: usize = 1;
    pub const TO: usize = 2;
    pub const NAME: usize = 3;
    pub const LT: usize = 4;
    pub const WK: usize = 6;
    pub const MAX: usize = 8;
    pub const PRI: usize = 9;
    pub const BO: usize = 10;
    pub const C0: usize = 11;
    pub const RT: usize = 12;
    pub const FT: usize = 13;
    pub const RP: usize = 14;
    pub const DR: usize = 15;
    pub const ERR: usize = 16;
    pub const GRP: usize = 17;
    pub const XA: usize = 18;
    pub const CX: usize = 19;
    /// Values a header has (a header written before issue 16 has the first 17: the
    /// decoder stops at the body, the one array of a record).
    pub const LEN: usize = 20;
}

/// The body of a job record: the MessagePack array [payload (bin), content type (str),
/// metadata JSON (str, "" for none)], which the scripts store after the header unread.
pub(crate) fn encode_body(payload: &[u8], content_type: &str, metadata_json: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(payload.len() + content_type.len() + metadata_json.len() + 12);
    // Writes into a Vec cannot fail.
    let _ = rmp::encode::write_array_len(&mut out, 3);
    let _ = rmp::encode::write_bin(&mut out, payload);
    let _ = rmp::encode::write_str(&mut out, content_type);
    let _ = rmp::encode::write_str(&mut out, metadata_json);
    out
}

/// A number of a record (an integer, or a float where Lua wrote one; anything else: 0).
fn number(v: &rmpv::Value) -> f64 {
    match v {
        rmpv::Value::Integer(i) => i.as_f64().unwrap_or_default(),
        rmpv::Value::F64(f) => *f,
        rmpv::Value::F32(f) => f64::from(*f),
        _ => 0.0,
    }
}

/// A text field of a record (str or bin, UTF-8).
fn text_of(v: rmpv::Value) -> Result<String, StoreError> {
    let raw = match v {
        rmpv::Value::String(s) => s.into_bytes(),
        rmpv::Value::Binary(b) => b,
        rmpv::Value::Nil => Vec::new(),
        _ => return Err(bad("job record: expected text")),
    };
    String::from_utf8(raw).map_err(|_| bad("job record: text is not UTF-8"))
}

/// Decodes a job record (`scripts/common.lua`: 17 header values, then the body array).
pub(crate) fn job_from_record(
    queue: &QueueName,
    id: String,
    rec: &[u8],
) -> Result<Job, StoreError> {
    let mut rest = rec;
    let read = |r: &mut &[u8]| {
        rmpv::decode::read_value(r)
            .map_err(|e| StoreError::Decode(format!("job record {id:?}: {e}")))
    };
    let mut hv = Vec::with_capacity(h::LEN);
    let body = loop {
        match read(&mut rest)? {
            rmpv::Value::Array(items) if items.len() == 3 => break items,
            _ if hv.len() == h::LEN => {
                return Err(StoreError::Decode(format!("job record {id:?}: bad body")))
            }
            v => hv.push(v),
        }
    };
    // A header of an older layout lacks the newest values: they read as unset.
    hv.resize(h::LEN, rmpv::Value::Nil);
    let mut take = |i: usize| std::mem::replace(&mut hv[i], rmpv::Value::Nil);
    let n = |v: rmpv::Value| number(&v);
    let state_text = text_of(take(h::ST))?;
    let state = JobState::parse(&state_text)
        .ok_or_else(|| StoreError::Decode(format!("job {id:?} has no valid state")))?;
    let errors_json = text_of(take(h::ERR))?;
    let errors: Vec<AttemptError> = if errors_json.is_empty() {
        Vec::new()
    } else {
        serde_json::from_str(&errors_json).map_err(|e| bad(&format!("errors: {e}")))?
    };
    let create_ms = n(take(h::C0)) as u64;
    // The header keeps the last holder's worker id after the lease ends: shown while active.
    let worker_id = match state {
        JobState::Active => text_of(take(h::WK))?,
        _ => String::new(),
    };
    let mut body = body.into_iter();
    let payload = match body.next() {
        Some(rmpv::Value::Binary(b)) => b,
        Some(other) => text_of(other)?.into_bytes(),
        None => Vec::new(),
    };
    let content_type = text_of(body.next().unwrap_or(rmpv::Value::Nil))?;
    let metadata_json = text_of(body.next().unwrap_or(rmpv::Value::Nil))?;
    let metadata = if metadata_json.is_empty() {
        BTreeMap::new()
    } else {
        serde_json::from_str(&metadata_json).map_err(|e| bad(&format!("metadata: {e}")))?
    };
    Ok(Job {
        idempotency_key: idempotency_key(queue, &id, create_ms),
        queue: queue.clone(),
        id,
        name: text_of(take(h::NAME))?,
        payload,
        content_type,
        metadata,
        state,
        priority: n(take(h::PRI)) as i32,
        max_attempts: n(take(h::MAX)) as u32,
        attempts_made: n(take(h::ATT)) as u32,
        backoff: Backoff::decode(&text_of(take(h::BO))?),
        timeout_ms: n(take(h::TO)) as u64,
        errors,
        errors_dropped: 0,
        dead_reason: DeadReason::parse(&text_of(take(h::DR))?),
        create_ms,
        ready_ms: n(take(h::RT)) as u64,
        lease_ms: n(take(h::LT)) as u64,
        finish_ms: n(take(h::FT)) as u64,
        replays: n(take(h::RP)) as u32,
        group_key: text_of(take(h::GRP))?,
        expire_ms: n(take(h::XA)) as u64,
        cancel_ms: n(take(h::CX)) as u64,
        data: JobData::default(),
        lease_deadline_ms: 0,
        worker_id,
        cancel_reason: String::new(),
    })
}

/// The cancel of a job as its data field `x` holds it (`'<revoke ms>,<reason>'`,
/// `scripts/common.lua`): (revoke ms, 0 for none; reason).
pub(crate) fn cancel_field(v: &[u8]) -> (u64, String) {
    let s = String::from_utf8_lossy(v);
    match s.split_once(',') {
        Some((revoke, reason)) => (revoke.parse().unwrap_or(0), reason.to_owned()),
        None => (0, s.into_owned()),
    }
}

/// Decodes a progress entry of the `data` hash (`p:<id>`, `scripts/progress.lua`): the
/// MessagePack array [percent, message, ms], into `data`. Nil (none) leaves it unset.
pub(crate) fn with_progress(data: &mut JobData, v: Value) -> Result<(), StoreError> {
    let raw = bytes(v)?;
    if raw.is_empty() {
        return Ok(());
    }
    let value = rmpv::decode::read_value(&mut raw.as_slice())
        .map_err(|e| StoreError::Decode(format!("progress entry: {e}")))?;
    let rmpv::Value::Array(items) = value else {
        return Err(bad("progress entry: expected an array"));
    };
    let mut items = items.into_iter();
    data.progress = number(&items.next().unwrap_or(rmpv::Value::Nil)) as u32;
    data.progress_message = text_of(items.next().unwrap_or(rmpv::Value::Nil))?;
    data.progress_ms = number(&items.next().unwrap_or(rmpv::Value::Nil)) as u64;
    Ok(())
}

/// Puts the error history (`{ '1', entry, k, entry, ..., 'dropped', n }` as `read_history`
/// in `scripts/common.lua` returns it) into `job`: the entries in order, and the dropped
/// count. An empty history leaves the errors of the header (none).
pub(crate) fn with_history(job: &mut Job, history: Value) -> Result<(), StoreError> {
    let mut fields = array(history)?.into_iter();
    let mut entries: Vec<(u64, AttemptError)> = Vec::new();
    let mut dropped = 0;
    while let Some(field) = fields.next() {
        let field = string(field)?;
        let value = bytes(next(&mut fields)?)?;
        if let Ok(seq) = field.parse::<u64>() {
            let e = serde_json::from_slice(&value).map_err(|e| bad(&format!("error: {e}")))?;
            entries.push((seq, e));
        } else if field == "dropped" {
            dropped = int(Value::BulkString(value))? as u64;
        }
    }
    if !entries.is_empty() {
        entries.sort_by_key(|(seq, _)| *seq);
        job.errors = entries.into_iter().map(|(_, e)| e).collect();
        job.errors_dropped = dropped;
    }
    Ok(())
}

/// A job's idempotency key: `<queue>/<id>/<create time ms>`. Stable across attempts and
/// replays (they keep the create time), different for a new job that reuses an id after
/// retention removed the old one; derived, so it costs no memory per job.
pub(crate) fn idempotency_key(queue: &QueueName, id: &str, create_ms: u64) -> String {
    format!("{queue}/{id}/{create_ms}")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A header as the scripts write it (cmsgpack: numbers as integers, strings as str).
    fn header(st: &str, att: i64, dr: &str, err: &str) -> Vec<u8> {
        let values = [
            st.into(),
            att.into(),
            0.into(),
            "send".into(),
            rmpv::Value::F64(1_733_040_001_000.0),
            "".into(),
            "".into(),
            0.into(),
            3.into(),
            5.into(),
            "exponential,1000,0,0".into(),
            1_733_040_000_000i64.into(),
            1_733_040_000_500i64.into(),
            0.into(),
            2.into(),
            dr.into(),
            err.into(),
        ];
        let mut out = Vec::new();
        for v in &values {
            rmpv::encode::write_value(&mut out, v).expect("encode");
        }
        out
    }

    #[test]
    fn decodes_a_job_record() {
        let q = QueueName::parse("q").expect("valid");
        let mut rec = header(
            "dead",
            1,
            "NO_RETRY",
            r#"[{"a":1,"m":"400 bad","t":"invalid","ts":5}]"#,
        );
        rec.extend(encode_body(
            b"\x00\xffbin",
            "application/json",
            r#"{"tenant":"t1"}"#,
        ));
        let job = job_from_record(&q, "id:1".into(), &rec).expect("decodes");
        assert_eq!(job.state, JobState::Dead);
        assert_eq!(job.dead_reason, Some(DeadReason::NoRetry));
        assert_eq!(job.metadata["tenant"], "t1");
        assert_eq!(job.errors[0].message, "400 bad");
        assert_eq!(job.payload, b"\x00\xffbin");
        assert_eq!(job.content_type, "application/json");
        assert_eq!((job.priority, job.max_attempts, job.replays), (5, 3, 2));
        assert_eq!(job.lease_ms, 1_733_040_001_000);
        assert_eq!(job.idempotency_key, "q/id:1/1733040000000");
    }

    #[test]
    fn decodes_a_progress_entry() {
        // As progress.lua packs it: [percent, message, ms].
        let mut raw = Vec::new();
        let entry = rmpv::Value::Array(vec![
            30.into(),
            "step 1".into(),
            1_733_040_002_000i64.into(),
        ]);
        rmpv::encode::write_value(&mut raw, &entry).expect("encode");
        let mut data = JobData::default();
        with_progress(&mut data, Value::BulkString(raw)).expect("decodes");
        assert_eq!(
            (
                data.progress,
                data.progress_message.as_str(),
                data.progress_ms
            ),
            (30, "step 1", 1_733_040_002_000)
        );
        let mut none = JobData::default();
        with_progress(&mut none, Value::Nil).expect("none");
        assert_eq!(none, JobData::default());
        assert!(with_progress(&mut none, Value::BulkString(vec![0x01])).is_err());
    }

    #[test]
    fn refuses_a_record_without_state_or_body() {
        let q = QueueName::parse("q").expect("valid");
        let mut bad_state = header("gone", 0, "", "");
        bad_state.extend(encode_body(b"", "", ""));
        assert!(job_from_record(&q, "x".into(), &bad_state).is_err());
        assert!(job_from_record(&q, "x".into(), &header("waiting", 0, "", "")).is_err());
        assert!(job_from_record(&q, "x".into(), b"\xc1").is_err());
    }
}
