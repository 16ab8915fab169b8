//! `jobwire jobs get|enqueue|cancel|delete` (and `list`, in `jobs_list`), and the job
//! rendering `dlq show` shares.

use std::collections::HashMap;
use std::io::Read;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand};
use jobwire_client::pb;
use serde::Serialize;

use super::global::GlobalArgs;
use super::output::print;
use super::table::{fit, pairs, WIDTH};
use super::time::{duration_to_pb, human};
use super::view::JobView;
use super::CliError;

/// `jobwire jobs ...`.
#[derive(Debug, Args)]
pub struct JobsArgs {
    #[command(flatten)]
    pub(super) global: GlobalArgs,
    #[command(subcommand)]
    command: JobsCommand,
}

/// Subcommands of `jobwire jobs`.
#[derive(Debug, Subcommand)]
enum JobsCommand {
    /// One job in any state, with its error history (producer, viewer).
    Get {
        /// The queue.
        queue: String,
        /// The job's id.
        job_id: String,
    },
    /// Enqueue a job (producer).
    Enqueue(Enqueue),
    /// A queue's jobs in one state, paged and filtered, without payloads (viewer).
    List(super::jobs_list::List),
    /// Cancel one job, or every waiting, delayed and active job matching a filter
    /// (producer, admin). A waiting or delayed job ends cancelled at once; the worker
    /// holding an active one is told, and the job ends cancelled when it settles or after
    /// the queue's cancel grace.
    Cancel(Cancel),
    /// Delete a job in any state but active, with its history; its id is free at once
    /// (admin).
    Delete {
        /// The queue.
        queue: String,
        /// The job's id.
        job_id: String,
    },
}

/// `jobwire jobs cancel <queue> [JOB_ID] [--name N] [--group G] [--metadata K[=V]]`.
#[derive(Debug, Args)]
struct Cancel {
    /// The queue.
    queue: String,
    /// The job's id; without it, the filter flags select the jobs.
    #[arg(conflicts_with_all = ["name", "group", "metadata"])]
    job_id: Option<String>,
    /// Why (recorded on the job and sent to the worker holding it; up to 1024 bytes).
    #[arg(long, default_value = "")]
    reason: String,
    /// Cancel the jobs of this name.
    #[arg(long)]
    name: Option<String>,
    /// Cancel the jobs of this group.
    #[arg(long)]
    group: Option<String>,
    /// Cancel the jobs whose metadata has KEY (with VALUE, when given).
    #[arg(long, value_name = "KEY[=VALUE]")]
    metadata: Option<String>,
}

/// `jobwire jobs enqueue <queue> <name> [PAYLOAD | --file F | -]`.
#[derive(Debug, Args)]
struct Enqueue {
    /// The queue.
    queue: String,
    /// The job's name (its type, e.g. send-welcome-email).
    name: String,
    /// The payload as text; `-` reads it from stdin. None (and no --file): empty.
    #[arg(conflicts_with = "file")]
    payload: Option<String>,
    /// Read the payload from this file (bytes as they are).
    #[arg(long, value_name = "FILE")]
    file: Option<PathBuf>,
    /// The job's id (the idempotency key: an existing id returns that job, created false).
    #[arg(long)]
    id: Option<String>,
    /// Wait this long before the first attempt (e.g. 10m).
    #[arg(long, value_parser = humantime::parse_duration)]
    delay: Option<Duration>,
    /// Higher runs first (-1000 to 1000).
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    priority: i32,
    /// Runs allowed (1 to 1000; default: the queue's).
    #[arg(long)]
    max_attempts: Option<u32>,
    /// The payload's MIME type. Default: application/json when the payload parses as JSON,
    /// else none.
    #[arg(long)]
    content_type: Option<String>,
    /// A metadata pair KEY=VALUE (repeatable).
    #[arg(long = "metadata", value_name = "KEY=VALUE")]
    metadata: Vec<String>,
}

/// Runs `jobwire jobs ...`.
pub async fn run(a: JobsArgs) -> Result<(), CliError> {
    let out = a.global.output;
    match a.command {
        JobsCommand::Get { queue, job_id } => {
            let c = a.global.connect().await?;
            super::known::require_queue(&c, &queue).await?;
            let job = JobView::from(&c.get_job(&queue, &job_id).await?);
            print(out, &job, job_text)
        }
        JobsCommand::List(l) => super::jobs_list::run(l, || a.global.connect(), out).await,
        JobsCommand::Cancel(x) => cancel(x, &a.global).await,
        JobsCommand::Delete { queue, job_id } => {
            let c = a.global.connect().await?;
            let state = c.delete_job(&queue, &job_id).await?;
            let v = Deleted {
                queue,
                job_id,
                state: super::view::state_name(state as i32),
            };
            print(out, &v, |v| {
                format!(
                    "Deleted job {} of queue {} (it was {}).\n",
                    v.job_id, v.queue, v.state
                )
            })
        }
        JobsCommand::Enqueue(e) => {
            // Local input first: a bad file or pair fails before connecting.
            let spec = spec(e)?;
            let c = a.global.connect().await?;
            let r = c.enqueue_spec(spec).await?;
            let v = Enqueued {
                created: r.created,
                job: JobView::from(&r.job),
            };
            print(out, &v, |v| {
                format!(
                    "{} job {} ({}) on queue {}: {}.\n",
                    if v.created {
                        "Enqueued"
                    } else {
                        "Already there:"
                    },
                    v.job.job_id,
                    v.job.name,
                    v.job.queue,
                    v.job.state
                )
            })
        }
    }
}

/// `jobs delete` as JSON.
#[derive(Serialize)]
struct Deleted {
    queue: String,
    job_id: String,
    /// The state the job was in.
    state: String,
}

/// `jobs cancel <queue> <id>` as JSON.
#[derive(Serialize)]
struct CancelledOne {
    /// False when the job had already finished or a cancel was already pending.
    cancelled: bool,
    job: JobView,
}

/// `jobs cancel <queue> --name ...` as JSON.
#[derive(Serialize)]
struct CancelledMany {
    queue: String,
    /// Waiting and delayed jobs now cancelled.
    cancelled: u64,
    /// Active jobs whose workers were told.
    signalled: u64,
}

async fn cancel(x: Cancel, global: &GlobalArgs) -> Result<(), CliError> {
    let out = global.output;
    if let Some(id) = &x.job_id {
        let c = global.connect().await?;
        let (job, cancelled) = c.cancel_job(&x.queue, id, &x.reason).await?;
        let v = CancelledOne {
            cancelled,
            job: JobView::from(&job),
        };
        return print(out, &v, |v| {
            let what = match (v.cancelled, v.job.state.as_str()) {
                (true, "active") => "its worker is told to stop".to_owned(),
                (true, _) => "cancelled".to_owned(),
                (false, "active") => "a cancel was already pending".to_owned(),
                (false, s) => format!("not cancelled: it is {s}"),
            };
            format!("Job {} of queue {}: {what}.\n", v.job.job_id, v.job.queue)
        });
    }
    let (metadata_key, metadata_value) = match &x.metadata {
        None => (String::new(), None),
        Some(m) => match m.split_once('=') {
            Some((k, v)) => (k.to_owned(), Some(v.to_owned())),
            None => (m.clone(), None),
        },
    };
    if x.name.is_none() && x.group.is_none() && metadata_key.is_empty() {
        return Err(CliError::usage(
            "jobs cancel: give a JOB_ID, or at least one of --name, --group, --metadata",
        ));
    }
    let filter = pb::JobFilter {
        name: x.name.clone().unwrap_or_default(),
        group_key: x.group.clone().unwrap_or_default(),
        metadata_key,
        metadata_value,
    };
    let c = global.connect().await?;
    let t = c.cancel_jobs(&x.queue, filter, &x.reason).await?;
    let v = CancelledMany {
        queue: x.queue,
        cancelled: t.cancelled,
        signalled: t.signalled,
    };
    print(out, &v, |v| {
        format!(
            "Queue {}: {} jobs cancelled, {} workers told to stop their jobs.\n",
            v.queue, v.cancelled, v.signalled
        )
    })
}

/// `jobs enqueue` as JSON.
#[derive(Serialize)]
struct Enqueued {
    /// False when the id existed: nothing changed, `job` is the existing job.
    created: bool,
    job: JobView,
}

fn spec(e: Enqueue) -> Result<pb::JobSpec, CliError> {
    let payload: Vec<u8> = match (&e.payload, &e.file) {
        (Some(p), _) if p == "-" => {
            let mut b = Vec::new();
            std::io::stdin()
                .read_to_end(&mut b)
                .map_err(|err| CliError::usage(format!("payload -: cannot read stdin: {err}")))?;
            b
        }
        (Some(p), _) => p.clone().into_bytes(),
        (None, Some(f)) => std::fs::read(f).map_err(|err| {
            CliError::usage(format!("--file {}: cannot read: {err}", f.display()))
        })?,
        (None, None) => Vec::new(),
    };
    let mut metadata = HashMap::new();
    for m in &e.metadata {
        let Some((k, v)) = m.split_once('=') else {
            return Err(CliError::usage(format!(
                "--metadata {m:?}: expected KEY=VALUE"
            )));
        };
        metadata.insert(k.to_owned(), v.to_owned());
    }
    let content_type = match e.content_type {
        Some(ct) => ct,
        None if !payload.is_empty()
            && serde_json::from_slice::<serde_json::Value>(&payload).is_ok() =>
        {
            "application/json".into()
        }
        None => String::new(),
    };
    Ok(pb::JobSpec {
        queue: e.queue,
        job_id: e.id.unwrap_or_default(),
        name: e.name,
        payload,
        content_type,
        metadata,
        delay: e.delay.map(duration_to_pb),
        priority: e.priority,
        max_attempts: e.max_attempts,
        backoff: None,
        timeout: None,
        group_key: String::new(),
        expire_time: None,
        ttl: None,
    })
}

fn opt(s: &Option<String>) -> String {
    s.clone().unwrap_or_else(|| "-".into())
}

/// A job for people: its fields as key-value lines, then its failed attempts as a table.
pub(super) fn job_text(j: &JobView) -> String {
    let payload = match j.payload_encoding {
        "utf8" => j.payload.clone(),
        _ => format!("(base64) {}", j.payload),
    };
    let mut rows = vec![
        ("queue", j.queue.clone()),
        ("job_id", j.job_id.clone()),
        ("name", j.name.clone()),
        ("state", j.state.clone()),
    ];
    if let Some(r) = &j.dead_reason {
        rows.push(("dead_reason", r.clone()));
    }
    rows.extend([
        (
            "attempts",
            format!("{} of {}", j.attempts_made, j.max_attempts),
        ),
        ("replays", j.replays.to_string()),
        ("priority", j.priority.to_string()),
        ("created", opt(&j.create_time)),
        ("ready", opt(&j.ready_time)),
        ("leased", opt(&j.lease_time)),
        ("finished", opt(&j.finish_time)),
        (
            "timeout",
            j.timeout.map(human).unwrap_or_else(|| "-".into()),
        ),
        (
            "backoff",
            super::queue_config::backoff_text(j.backoff.as_ref()),
        ),
        ("content_type", j.content_type.clone()),
        ("payload", payload),
    ]);
    let meta: Vec<String> = j.metadata.iter().map(|(k, v)| format!("{k}={v}")).collect();
    rows.push((
        "metadata",
        if meta.is_empty() {
            "-".into()
        } else {
            meta.join(" ")
        },
    ));
    let mut s = pairs(&rows);
    if !j.errors.is_empty() {
        s.push_str("\nerrors (oldest first):\n");
        for e in &j.errors {
            let head = format!(
                "  attempt {}  {}  {} ({})  worker {}",
                e.attempt,
                opt(&e.fail_time),
                e.error_type,
                opt(&e.disposition),
                e.worker_id
            );
            s.push_str(&fit(&head, WIDTH));
            s.push('\n');
            let msg: String = e
                .message
                .chars()
                .map(|c| if c.is_control() { ' ' } else { c })
                .collect();
            s.push_str(&fit(&format!("    {msg}"), WIDTH));
            s.push('\n');
        }
        if j.errors_dropped > 0 {
            s.push_str(&format!(
                "  ({} failed attempts between the first and these were dropped from the history)\n",
                j.errors_dropped
            ));
        }
    }
    s
}
