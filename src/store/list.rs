//! Listing a queue's jobs by state (`list_jobs.lua`): one read-only script call a page, in
//! the order of the state's index, with a cursor that names the last job examined (see the
//! script for why a walk under concurrent changes neither repeats nor skips a job that
//! stayed in place).

use super::client::Store;
use super::codec::{array, bytes, job_from_record, next, string, with_progress};
use super::keys::Keys;
use super::{scripts, StoreError};
use crate::jobs::{Job, JobState, QueueName};

/// Entries one call may examine beyond the page size (bounds each call's time inside
/// Redis when a filter skips most jobs; the page is then short, with a cursor to go on).
const SCAN_BUDGET: usize = 500;

/// A page ends once the job records it read reach this many bytes (payloads included,
/// although the reply leaves them out): one call moves a bounded amount of data.
pub const LIST_PAGE_BYTES: usize = 1024 * 1024;

/// Which jobs of the state a listing keeps; every set field must match.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct JobsFilter {
    /// Exact job name; empty: any.
    pub name: String,
    /// At or after this time (ms), over the time that orders the state's index.
    pub after_ms: Option<u64>,
    /// Before this time (ms).
    pub before_ms: Option<u64>,
}

/// Where a listing goes on: the last job examined and its place in the state's index.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobsCursor {
    /// The part of the index: `z` (a sorted-set state), or for waiting `hi` (priority above
    /// 0), `l` (the priority-0 list) or `lo` (priority below 0).
    pub segment: String,
    /// The job's score in the sorted set, or its index in the list (decimal digits).
    pub position: String,
    /// The job's id.
    pub id: String,
}

impl JobsCursor {
    /// Is this a cursor a listing of `state` can have made (segment and position forms)?
    pub fn fits(&self, state: JobState) -> bool {
        let seg_ok = match state {
            JobState::Waiting => matches!(self.segment.as_str(), "hi" | "l" | "lo" | "g"),
            _ => self.segment == "z",
        };
        seg_ok
            && !self.position.is_empty()
            && self.position.len() <= 20
            && self.position.bytes().all(|b| b.is_ascii_digit())
    }
}

/// One page of jobs.
#[derive(Debug)]
pub struct JobsPage {
    /// The jobs, in the state's order, without payloads and with only their last error; with
    /// their progress but not their checkpoint or result.
    pub jobs: Vec<Job>,
    /// Where the next page starts; `None` at the end.
    pub next_cursor: Option<JobsCursor>,
}

impl Store {
    /// Lists up to `page_size` jobs of `queue` in `state` matching `filter`, after `cursor`
    /// (`list_jobs.lua`). A page may be short (even empty) when the filter skips many
    /// entries or its records reached [`LIST_PAGE_BYTES`]; only an absent `next_cursor`
    /// means the end. A queue that does not exist lists nothing.
    pub async fn list_jobs(
        &self,
        queue: &QueueName,
        state: JobState,
        filter: &JobsFilter,
        cursor: Option<&JobsCursor>,
        page_size: usize,
    ) -> Result<JobsPage, StoreError> {
        let ms = |v: Option<u64>| v.map_or(-1, |v| v as i64).to_string().into_bytes();
        let (seg, pos, id) = match cursor {
            Some(c) => (c.segment.as_str(), c.position.as_str(), c.id.as_str()),
            None => ("", "", ""),
        };
        let args = vec![
            state.as_str().as_bytes().to_vec(),
            seg.as_bytes().to_vec(),
            pos.as_bytes().to_vec(),
            id.as_bytes().to_vec(),
            page_size.to_string().into_bytes(),
            (page_size + SCAN_BUDGET).to_string().into_bytes(),
            LIST_PAGE_BYTES.to_string().into_bytes(),
            filter.name.clone().into_bytes(),
            ms(filter.after_ms),
            ms(filter.before_ms),
        ];
        let mut reply = array(
            self.run_script(&scripts::LIST_JOBS, &Keys::new(queue), args)
                .await?,
        )?
        .into_iter();
        let segment = string(next(&mut reply)?)?;
        let position = string(next(&mut reply)?)?;
        let last = string(next(&mut reply)?)?;
        let next_cursor = (!segment.is_empty()).then_some(JobsCursor {
            segment,
            position,
            id: last,
        });
        let mut jobs = Vec::new();
        for item in reply {
            let mut f = array(item)?.into_iter();
            let id = string(next(&mut f)?)?;
            let mut job = job_from_record(queue, id, &bytes(next(&mut f)?)?)?;
            if let Some(p) = f.next() {
                with_progress(&mut job.data, p)?;
            }
            jobs.push(job);
        }
        Ok(JobsPage { jobs, next_cursor })
    }
}
