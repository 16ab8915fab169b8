//! `jobwire dlq list|show|replay|delete`: the dead-letter queue, filtered like the RPC
//! (job name, error type, reason, message prefix, time range).

use std::time::SystemTime;

use clap::{Args, Subcommand, ValueEnum};
use jobwire_client::pb;
use serde::Serialize;

use super::bulk::{self, Action};
use super::global::GlobalArgs;
use super::jobs::job_text;
use super::output::print;
use super::table::Table;
use super::time::{parse_time, relative, to_pb};
use super::view::JobView;
use super::CliError;

/// `jobwire dlq ...`.
#[derive(Debug, Args)]
pub struct DlqArgs {
    #[command(flatten)]
    pub(super) global: GlobalArgs,
    #[command(subcommand)]
    command: DlqCommand,
}

/// Subcommands of `jobwire dlq`.
#[derive(Debug, Subcommand)]
enum DlqCommand {
    /// A queue's dead jobs, oldest death first (viewer).
    List {
        /// The queue.
        queue: String,
        #[command(flatten)]
        filter: FilterArgs,
        /// Print at most this many jobs (0: all).
        #[arg(long, default_value_t = 100)]
        limit: usize,
        /// Continue after a previous list (its next_page_token).
        #[arg(long, default_value = "")]
        page_token: String,
    },
    /// One dead job with its error history (viewer).
    Show {
        /// The queue.
        queue: String,
        /// The job's id.
        job_id: String,
    },
    /// Move dead jobs back to waiting with a fresh attempt budget: the ids given, else every
    /// dead job the filter flags match (admin; confirms).
    Replay(BulkArgs),
    /// Delete dead jobs for good: the ids given, else every dead job the filter flags match
    /// (admin; confirms).
    Delete(BulkArgs),
}

/// The arguments of `dlq replay` and `dlq delete`.
#[derive(Debug, Args)]
struct BulkArgs {
    /// The queue.
    queue: String,
    /// The jobs' ids; none: select by the filter flags (no flags: every dead job).
    job_ids: Vec<String>,
    #[command(flatten)]
    filter: FilterArgs,
    /// Print the count and the first ids, and change nothing.
    #[arg(long)]
    dry_run: bool,
    /// Do not ask for confirmation.
    #[arg(short, long)]
    yes: bool,
}

/// Dead reasons for `--reason`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
#[value(rename_all = "snake_case")]
enum Reason {
    NoRetry,
    AttemptsExhausted,
    LeaseExpired,
    TimedOut,
}

/// The filter of ListDeadLetters (every flag given must match).
#[derive(Debug, Args)]
struct FilterArgs {
    /// Exact job name.
    #[arg(long)]
    job_name: Option<String>,
    /// Exact error_type of the last failed attempt.
    #[arg(long)]
    error_type: Option<String>,
    /// Why the job died.
    #[arg(long, value_enum)]
    reason: Option<Reason>,
    /// Prefix of the last failed attempt's message (e.g. 503).
    #[arg(long)]
    message_prefix: Option<String>,
    /// Died at or after this time: RFC 3339 (2026-12-02T03:00:00Z) or an age (2h: two hours
    /// ago).
    #[arg(long, value_name = "TIME")]
    dead_after: Option<String>,
    /// Died before this time: RFC 3339 or an age.
    #[arg(long, value_name = "TIME")]
    dead_before: Option<String>,
}

impl FilterArgs {
    /// The RPC's filter; `None` when no flag is given. A bad time is a usage error.
    fn to_pb(&self, now: SystemTime) -> Result<Option<pb::DeadLetterFilter>, CliError> {
        let time = |flag: &str, v: &Option<String>| {
            v.as_deref()
                .map(|v| parse_time(flag, v, now).map(to_pb))
                .transpose()
        };
        let f = pb::DeadLetterFilter {
            job_name: self.job_name.clone().unwrap_or_default(),
            error_type: self.error_type.clone().unwrap_or_default(),
            reason: match self.reason {
                None => pb::DeadReason::Unspecified,
                Some(Reason::NoRetry) => pb::DeadReason::NoRetry,
                Some(Reason::AttemptsExhausted) => pb::DeadReason::AttemptsExhausted,
                Some(Reason::LeaseExpired) => pb::DeadReason::LeaseExpired,
                Some(Reason::TimedOut) => pb::DeadReason::TimedOut,
            } as i32,
            error_message_prefix: self.message_prefix.clone().unwrap_or_default(),
            dead_after: time("--dead-after", &self.dead_after)?,
            dead_before: time("--dead-before", &self.dead_before)?,
        };
        Ok((f != pb::DeadLetterFilter::default()).then_some(f))
    }
}

/// `dlq list` as JSON.
#[derive(Serialize)]
struct DeadList {
    dead_letters: Vec<JobView>,
    /// Pass as --page-token for more; empty when there are no more.
    next_page_token: String,
    /// When the list was read (for the table's ages; not printed).
    #[serde(skip)]
    now: SystemTime,
}

impl DeadList {
    /// How long ago `j` died, for people (`3m12s ago`).
    fn died_ago(&self, j: &JobView) -> String {
        relative(j.finish_time.as_deref(), self.now)
    }
}

/// Runs `jobwire dlq ...`.
pub async fn run(a: DlqArgs) -> Result<(), CliError> {
    let out = a.global.output;
    let now = SystemTime::now();
    match a.command {
        DlqCommand::List {
            queue,
            filter,
            limit,
            page_token,
        } => {
            let filter = filter.to_pb(now)?;
            let c = a.global.connect().await?;
            super::known::require_queue(&c, &queue).await?;
            let mut jobs = Vec::new();
            let mut token = page_token;
            loop {
                let want = if limit == 0 {
                    1000
                } else {
                    (limit - jobs.len()).min(1000)
                };
                let r = c
                    .list_dead_letters(&queue, want as i32, &token, filter.clone())
                    .await?;
                jobs.extend(r.dead_letters.iter().map(JobView::from));
                token = r.next_page_token;
                if token.is_empty() || (limit > 0 && jobs.len() >= limit) {
                    break;
                }
            }
            let list = DeadList {
                dead_letters: jobs,
                next_page_token: token,
                now: SystemTime::now(),
            };
            print(out, &list, dead_table)
        }
        DlqCommand::Show { queue, job_id } => {
            let c = a.global.connect().await?;
            super::known::require_queue(&c, &queue).await?;
            let job = JobView::from(&c.get_dead_letter(&queue, &job_id).await?);
            print(out, &job, job_text)
        }
        DlqCommand::Replay(b) => bulk_run(a.global, b, Action::Replay, now).await,
        DlqCommand::Delete(b) => bulk_run(a.global, b, Action::Delete, now).await,
    }
}

async fn bulk_run(
    g: GlobalArgs,
    b: BulkArgs,
    action: Action,
    now: SystemTime,
) -> Result<(), CliError> {
    let filter = b.filter.to_pb(now)?;
    if !b.job_ids.is_empty() && filter.is_some() {
        return Err(CliError::usage(format!(
            "dlq {}: give job ids or filter flags, not both",
            action.verb()
        )));
    }
    let c = g.connect().await?;
    super::known::require_queue(&c, &b.queue).await?;
    bulk::run(
        &c,
        bulk::Selection {
            queue: b.queue,
            job_ids: b.job_ids,
            filter,
        },
        action,
        b.dry_run,
        b.yes,
        g.output,
    )
    .await
}

fn dead_table(l: &DeadList) -> String {
    let mut t = Table::new(&["JOB_ID", "NAME", "REASON", "ERROR_TYPE", "DIED", "MESSAGE"]).flex(5);
    for j in &l.dead_letters {
        let last = j.errors.last();
        t.row(vec![
            j.job_id.clone(),
            j.name.clone(),
            j.dead_reason.clone().unwrap_or_default(),
            last.map(|e| e.error_type.clone()).unwrap_or_default(),
            l.died_ago(j),
            last.map(|e| e.message.clone()).unwrap_or_default(),
        ]);
    }
    let mut s = t.render();
    if l.dead_letters.is_empty() && l.next_page_token.is_empty() {
        s.push_str("(no dead job matches)\n");
    }
    if !l.next_page_token.is_empty() {
        s.push_str(&format!(
            "(more: --page-token {} or --limit 0; the next page may be empty)\n",
            l.next_page_token
        ));
    }
    s
}
