//! `jobwire jobs list <queue> --state S`: a queue's jobs in one state, paged and filtered
//! (ListJobs). Jobs come without their payload and with only their last failed attempt
//! (`jobs get` has both).

use std::time::SystemTime;

use clap::{Args, ValueEnum};
use jobwire_client::{pb, Client};
use serde::Serialize;

use super::global::Format;
use super::output::print;
use super::table::Table;
use super::time::{parse_time, relative, to_pb};
use super::view::JobView;
use super::CliError;

/// States for `--state`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum State {
    /// Ready to lease, in lease order.
    Waiting,
    /// Waiting out a delay or backoff, by due time.
    Delayed,
    /// Leased, by lease deadline.
    Active,
    /// Completed (kept by retention), by finish time.
    Completed,
    /// Dead, by death time.
    Dead,
    /// Cancelled (kept by the completed retention), by finish time.
    Cancelled,
    /// Expired before they started (kept by the completed retention), by finish time.
    Expired,
}

/// `jobwire jobs list`.
#[derive(Debug, Args)]
pub struct List {
    /// The queue.
    queue: String,
    /// The state to list.
    #[arg(long, value_enum, default_value = "waiting")]
    state: State,
    /// Exact job name.
    #[arg(long)]
    name: Option<String>,
    /// At or after this time (RFC 3339 or an age such as 2h), over the time that orders
    /// the state: ready (waiting), due (delayed), lease deadline (active), finished
    /// (completed), died (dead).
    #[arg(long, value_name = "TIME")]
    after: Option<String>,
    /// Before this time (RFC 3339 or an age), over the same time.
    #[arg(long, value_name = "TIME")]
    before: Option<String>,
    /// Print at most this many jobs (0: all).
    #[arg(long, default_value_t = 100)]
    limit: usize,
    /// Continue after a previous list (its next_page_token).
    #[arg(long, default_value = "")]
    page_token: String,
}

/// `jobs list` as JSON.
#[derive(Serialize)]
struct JobList {
    jobs: Vec<JobView>,
    /// Pass as --page-token for more; empty when there are no more.
    next_page_token: String,
    /// For the table (not printed).
    #[serde(skip)]
    state: Option<State>,
    #[serde(skip)]
    now: Option<SystemTime>,
}

impl List {
    /// The RPC's filter; a bad time is a usage error (exit 2).
    fn filter(&self, now: SystemTime) -> Result<Option<pb::ListJobsFilter>, CliError> {
        let time = |flag: &str, v: &Option<String>| {
            v.as_deref()
                .map(|v| parse_time(flag, v, now).map(to_pb))
                .transpose()
        };
        let f = pb::ListJobsFilter {
            name: self.name.clone().unwrap_or_default(),
            after: time("--after", &self.after)?,
            before: time("--before", &self.before)?,
        };
        Ok((f != pb::ListJobsFilter::default()).then_some(f))
    }
}

/// Runs `jobwire jobs list`; `connect` is called after the local input is checked.
pub async fn run<F, Fut>(l: List, connect: F, out: Format) -> Result<(), CliError>
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = Result<Client, CliError>>,
{
    let now = SystemTime::now();
    let filter = l.filter(now)?;
    let c = connect().await?;
    super::known::require_queue(&c, &l.queue).await?;
    let state = match l.state {
        State::Waiting => pb::JobState::Waiting,
        State::Delayed => pb::JobState::Delayed,
        State::Active => pb::JobState::Active,
        State::Completed => pb::JobState::Completed,
        State::Dead => pb::JobState::Dead,
        State::Cancelled => pb::JobState::Cancelled,
        State::Expired => pb::JobState::Expired,
    };
    let mut jobs = Vec::new();
    let mut token = l.page_token;
    loop {
        let want = if l.limit == 0 {
            1000
        } else {
            (l.limit - jobs.len()).min(1000)
        };
        let r = c
            .list_jobs(&l.queue, state, want as i32, &token, filter.clone())
            .await?;
        jobs.extend(r.jobs.iter().map(JobView::from));
        token = r.next_page_token;
        if token.is_empty() || (l.limit > 0 && jobs.len() >= l.limit) {
            break;
        }
    }
    let list = JobList {
        jobs,
        next_page_token: token,
        state: Some(l.state),
        now: Some(SystemTime::now()),
    };
    print(out, &list, table)
}

fn table(l: &JobList) -> String {
    let now = l.now.unwrap_or_else(SystemTime::now);
    let (when, header) = match l.state.unwrap_or(State::Waiting) {
        State::Waiting => (When::Ready, "READY"),
        State::Delayed => (When::Ready, "DUE"),
        State::Active => (When::Leased, "LEASED"),
        State::Completed => (When::Finished, "FINISHED"),
        State::Dead => (When::Finished, "DIED"),
        State::Cancelled | State::Expired => (When::Finished, "FINISHED"),
    };
    let mut t = Table::new(&[
        "JOB_ID",
        "NAME",
        "PRIORITY",
        "ATTEMPTS",
        header,
        "LAST_ERROR",
    ])
    .flex(5);
    for j in &l.jobs {
        let time = match when {
            When::Ready => &j.ready_time,
            When::Leased => &j.lease_time,
            When::Finished => &j.finish_time,
        };
        t.row(vec![
            j.job_id.clone(),
            j.name.clone(),
            j.priority.to_string(),
            format!("{}/{}", j.attempts_made, j.max_attempts),
            relative(time.as_deref(), now),
            j.errors
                .last()
                .map(|e| format!("{}: {}", e.error_type, e.message))
                .unwrap_or_default(),
        ]);
    }
    let mut s = t.render();
    if l.jobs.is_empty() && l.next_page_token.is_empty() {
        s.push_str("(no job matches)\n");
    }
    if !l.next_page_token.is_empty() {
        s.push_str(&format!(
            "(more: --page-token {} or --limit 0; the next page may be empty)\n",
            l.next_page_token
        ));
    }
    s
}

/// Which time the table shows for a state.
#[derive(Clone, Copy)]
enum When {
    Ready,
    Leased,
    Finished,
}
