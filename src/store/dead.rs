//! Dead-letter reads and transitions: list (paged, filtered), replay, delete.
//! Filtered replay and delete walk the dead set in bounded chunks: each chunk is one atomic
//! script call, and the calls follow each other until the set is exhausted. A walk acts only
//! on the entries dead when its first call ran (the newest score then bounds the later
//! calls), so jobs it replays that die again meanwhile are not chased.

use super::client::Store;
use super::codec::{array, bytes, job_from_record, next, string, with_history};
use super::keys::Keys;
use super::{scripts, StoreError};
use crate::jobs::{DeadFilter, Job, QueueName};

/// Entries one script call may examine (bounds each call's time inside Redis: about 0.1 ms
/// an entry with max-size errors, `tests/it/script_time.rs`).
const SCAN_BUDGET: usize = 100;

/// Ids one replay or delete call takes; a longer list goes in several calls, each job
/// still moved atomically.
const IDS_PER_CALL: usize = 100;

/// A page of dead jobs ends once its records and error histories pass this many bytes
/// (bounds the reply and the call's time; the page is short, with a cursor to go on).
const PAGE_BYTES: usize = 1024 * 1024;

/// Which dead jobs a replay or delete acts on.
#[derive(Clone, Debug)]
pub enum DeadSelector {
    /// These ids (ids that are not dead are skipped).
    Ids(Vec<String>),
    /// Every dead job matching the filter.
    Filter(DeadFilter),
}

/// One page of dead jobs.
#[derive(Debug)]
pub struct DeadPage {
    /// The jobs, oldest death first.
    pub jobs: Vec<Job>,
    /// Where the next page starts (an opaque score), `None` at the end.
    pub next_cursor: Option<String>,
}

fn filter_args(f: &DeadFilter) -> Vec<Vec<u8>> {
    let ms = |v: Option<u64>| v.map_or(-1, |v| v as i64).to_string().into_bytes();
    vec![
        f.job_name.clone().into_bytes(),
        f.error_type.clone().into_bytes(),
        f.reason
            .map(|r| r.as_str())
            .unwrap_or_default()
            .as_bytes()
            .to_vec(),
        f.error_message_prefix.clone().into_bytes(),
        ms(f.dead_after_ms),
        ms(f.dead_before_ms),
    ]
}

fn strings(v: redis::Value) -> Result<Vec<String>, StoreError> {
    array(v)?.into_iter().map(string).collect()
}

fn cursor(s: String) -> Option<String> {
    (!s.is_empty()).then_some(s)
}

impl Store {
    /// Lists up to `page_size` dead jobs matching `filter`, after `cursor`
    /// (`list_dead.lua`). A page may be short when the filter skips many entries; only an
    /// absent `next_cursor` means the end.
    pub async fn list_dead(
        &self,
        queue: &QueueName,
        filter: &DeadFilter,
        cursor_in: Option<&str>,
        page_size: usize,
    ) -> Result<DeadPage, StoreError> {
        let mut args = filter_args(filter);
        args.extend([
            cursor_in.unwrap_or("").as_bytes().to_vec(),
            page_size.to_string().into_bytes(),
            (SCAN_BUDGET.max(page_size)).to_string().into_bytes(),
            PAGE_BYTES.to_string().into_bytes(),
        ]);
        let mut reply = array(
            self.run_script(&scripts::LIST_DEAD, &Keys::new(queue), args)
                .await?,
        )?
        .into_iter();
        let next_cursor = cursor(string(next(&mut reply)?)?);
        let mut jobs = Vec::new();
        for item in reply {
            let mut f = array(item)?.into_iter();
            let id = string(next(&mut f)?)?;
            let mut job = job_from_record(queue, id, &bytes(next(&mut f)?)?)?;
            with_history(&mut job, next(&mut f)?)?;
            jobs.push(job);
        }
        Ok(DeadPage { jobs, next_cursor })
    }

    /// Moves the selected dead jobs back to waiting with a fresh attempt budget
    /// (`replay.lua`). Returns (replayed ids, skipped ids).
    pub async fn replay(
        &self,
        queue: &QueueName,
        selector: &DeadSelector,
    ) -> Result<(Vec<String>, Vec<String>), StoreError> {
        self.dead_action(&scripts::REPLAY, queue, selector).await
    }

    /// Deletes the selected dead jobs (`delete_dead.lua`). Returns (deleted, skipped ids).
    pub async fn delete_dead(
        &self,
        queue: &QueueName,
        selector: &DeadSelector,
    ) -> Result<(Vec<String>, Vec<String>), StoreError> {
        self.dead_action(&scripts::DELETE_DEAD, queue, selector)
            .await
    }

    async fn dead_action(
        &self,
        script: &super::scripts::NamedScript,
        queue: &QueueName,
        selector: &DeadSelector,
    ) -> Result<(Vec<String>, Vec<String>), StoreError> {
        let keys = Keys::new(queue);
        let (mut done, mut skipped) = (Vec::new(), Vec::new());
        if let DeadSelector::Ids(ids) = selector {
            let mut start = 0;
            while start < ids.len() {
                let chunk = &ids[start..(start + IDS_PER_CALL).min(ids.len())];
                let mut a = vec![b"ids".to_vec(), chunk.len().to_string().into_bytes()];
                a.extend(chunk.iter().map(|id| id.clone().into_bytes()));
                let mut reply = array(self.run_script(script, &keys, a).await?)?.into_iter();
                let d = strings(next(&mut reply)?)?;
                let s = strings(next(&mut reply)?)?;
                // Fewer than sent when the call's byte budget ran out: the ids not reached
                // (the rest of the chunk) go in the next call.
                let answered = d.len() + s.len();
                if answered == 0 {
                    return Err(super::codec::bad("dead-letter script answered for no id"));
                }
                start += answered;
                done.extend(d);
                skipped.extend(s);
            }
            return Ok((done, skipped));
        }
        let mut at = String::new();
        // The walk's last score, fixed by its first call: what dies later is not acted on.
        let mut upto = String::new();
        loop {
            let args = match selector {
                DeadSelector::Ids(ids) => {
                    let mut a = vec![b"ids".to_vec(), ids.len().to_string().into_bytes()];
                    a.extend(ids.iter().map(|id| id.clone().into_bytes()));
                    a
                }
                DeadSelector::Filter(f) => {
                    let mut a = vec![b"filter".to_vec()];
                    a.extend(filter_args(f));
                    a.extend([
                        at.clone().into_bytes(),
                        SCAN_BUDGET.to_string().into_bytes(),
                        upto.clone().into_bytes(),
                    ]);
                    a
                }
            };
            let mut reply = array(self.run_script(script, &keys, args).await?)?.into_iter();
            done.extend(strings(next(&mut reply)?)?);
            skipped.extend(strings(next(&mut reply)?)?);
            match cursor(string(next(&mut reply)?)?) {
                Some(c) => {
                    at = c;
                    upto = string(next(&mut reply)?)?;
                }
                None => return Ok((done, skipped)),
            }
        }
    }
}
