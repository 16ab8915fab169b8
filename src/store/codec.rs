//! Decoding of script replies and job hashes (field names as in `scripts/common.lua`).

use std::collections::BTreeMap;

use redis::Value;

use super::StoreError;
use crate::jobs::{AttemptError, Backoff, DeadReason, Job, JobState, QueueName};

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

fn num<T: std::str::FromStr + Default>(fields: &BTreeMap<String, Vec<u8>>, k: &str) -> T {
    fields
        .get(k)
        .and_then(|v| std::str::from_utf8(v).ok())
        .and_then(|s| s.parse().ok())
        .unwrap_or_default()
}

fn text(fields: &mut BTreeMap<String, Vec<u8>>, k: &str) -> Result<String, StoreError> {
    match fields.remove(k) {
        Some(v) => String::from_utf8(v).map_err(|_| bad("job field is not UTF-8")),
        None => Ok(String::new()),
    }
}

/// Decodes a job from its hash fields (HGETALL's flat field/value list).
pub(crate) fn job_from_hash(
    queue: &QueueName,
    id: String,
    flat: Vec<Value>,
) -> Result<Job, StoreError> {
    let mut fields = BTreeMap::new();
    let mut it = flat.into_iter();
    while let (Some(k), Some(v)) = (it.next(), it.next()) {
        fields.insert(string(k)?, bytes(v)?);
    }
    let state = fields
        .get("st")
        .and_then(|s| std::str::from_utf8(s).ok())
        .and_then(JobState::parse)
        .ok_or_else(|| StoreError::Decode(format!("job {id:?} has no valid state")))?;
    let metadata_json = text(&mut fields, "md")?;
    let metadata = if metadata_json.is_empty() {
        BTreeMap::new()
    } else {
        serde_json::from_str(&metadata_json).map_err(|e| bad(&format!("metadata: {e}")))?
    };
    let errors_json = text(&mut fields, "err")?;
    let errors: Vec<AttemptError> = if errors_json.is_empty() {
        Vec::new()
    } else {
        serde_json::from_str(&errors_json).map_err(|e| bad(&format!("errors: {e}")))?
    };
    let create_ms = num(&fields, "c0");
    let id_for_key = id.clone();
    Ok(Job {
        queue: queue.clone(),
        id,
        name: text(&mut fields, "n")?,
        payload: fields.remove("p").unwrap_or_default(),
        content_type: text(&mut fields, "ct")?,
        metadata,
        state,
        priority: num(&fields, "pri"),
        max_attempts: num(&fields, "max"),
        attempts_made: num(&fields, "att"),
        backoff: Backoff::decode(&text(&mut fields, "bo")?),
        timeout_ms: num(&fields, "to"),
        errors,
        dead_reason: DeadReason::parse(&text(&mut fields, "dr")?),
        create_ms,
        ready_ms: num(&fields, "rt"),
        lease_ms: num(&fields, "lt"),
        finish_ms: num(&fields, "ft"),
        idempotency_key: idempotency_key(queue, &id_for_key, create_ms),
        replays: num(&fields, "rp"),
    })
}

/// A job's idempotency key: `<queue>/<id>/<create time ms>`. Stable across attempts and
/// replays (they keep the create time), different for a new job that reuses an id after
/// retention removed the old one; derived, so it costs no memory per job.
pub(crate) fn idempotency_key(queue: &QueueName, id: &str, create_ms: u64) -> String {
    format!("{queue}/{id}/{create_ms}")
}

/// A number field of a script reply ('' or unparsable: the default).
fn num_value<T: std::str::FromStr + Default>(v: Value) -> Result<T, StoreError> {
    Ok(match v {
        Value::Int(i) => i.to_string().parse().unwrap_or_default(),
        other => string(other)?.parse().unwrap_or_default(),
    })
}

/// Decodes the fields `lease.lua` returns for one leased job, in its reply order
/// (n, p, ct, md, pri, max, bo, to, err, c0, rt, rp), without building a field map:
/// this runs once per delivered job.
pub(crate) fn leased_job(
    queue: &QueueName,
    id: String,
    attempt: u32,
    now_ms: u64,
    f: &mut std::vec::IntoIter<Value>,
) -> Result<Job, StoreError> {
    let name = string(next(f)?)?;
    let payload = bytes(next(f)?)?;
    let content_type = string(next(f)?)?;
    let metadata_json = string(next(f)?)?;
    let metadata = if metadata_json.is_empty() {
        BTreeMap::new()
    } else {
        serde_json::from_str(&metadata_json).map_err(|e| bad(&format!("metadata: {e}")))?
    };
    let priority = num_value(next(f)?)?;
    let max_attempts = num_value(next(f)?)?;
    let backoff = Backoff::decode(&string(next(f)?)?);
    let timeout_ms = num_value(next(f)?)?;
    let errors_json = string(next(f)?)?;
    let errors: Vec<AttemptError> = if errors_json.is_empty() {
        Vec::new()
    } else {
        serde_json::from_str(&errors_json).map_err(|e| bad(&format!("errors: {e}")))?
    };
    let create_ms = num_value(next(f)?)?;
    let key_id = id.clone();
    Ok(Job {
        queue: queue.clone(),
        id,
        name,
        payload,
        content_type,
        metadata,
        state: JobState::Active,
        priority,
        max_attempts,
        attempts_made: attempt,
        backoff,
        timeout_ms,
        errors,
        dead_reason: None,
        create_ms,
        ready_ms: num_value(next(f)?)?,
        lease_ms: now_ms,
        finish_ms: 0,
        idempotency_key: idempotency_key(queue, &key_id, create_ms),
        replays: num_value(next(f)?)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bs(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn decodes_a_job_hash() {
        let q = QueueName::parse("q").expect("valid");
        let flat = vec![
            bs("n"),
            bs("send"),
            bs("st"),
            bs("dead"),
            bs("dr"),
            bs("NO_RETRY"),
            bs("att"),
            bs("1"),
            bs("md"),
            bs(r#"{"tenant":"t1"}"#),
            bs("err"),
            bs(r#"[{"a":1,"m":"400 bad","t":"invalid","ts":5}]"#),
        ];
        let job = job_from_hash(&q, "id:1".into(), flat).expect("decodes");
        assert_eq!(job.state, JobState::Dead);
        assert_eq!(job.dead_reason, Some(DeadReason::NoRetry));
        assert_eq!(job.metadata["tenant"], "t1");
        assert_eq!(job.errors[0].message, "400 bad");
    }

    #[test]
    fn refuses_a_hash_without_state() {
        let q = QueueName::parse("q").expect("valid");
        assert!(job_from_hash(&q, "x".into(), vec![bs("n"), bs("a")]).is_err());
    }
}
