//! `jobwire queues list|stats|pause|resume|purge|config get|config set|delete`.

use std::time::Duration;

use clap::{Args, Subcommand, ValueEnum};
use jobwire_client::{pb, Client};
use serde::Serialize;

use super::global::{Format, GlobalArgs};
use super::output::print;
use super::table::{pairs, Table};
use super::time::{duration_to_pb, human};
use super::view::{BackoffView, QueueConfigView, QueueStatsView};
use super::{prompt, CliError};

/// `jobwire queues ...`.
#[derive(Debug, Args)]
pub struct QueuesArgs {
    #[command(flatten)]
    global: GlobalArgs,
    #[command(subcommand)]
    command: QueuesCommand,
}

/// Subcommands of `jobwire queues`.
#[derive(Debug, Subcommand)]
enum QueuesCommand {
    /// Every queue with its counts (viewer).
    List,
    /// One queue's counts, ages, paused flag, workers and config (viewer).
    Stats {
        /// The queue.
        queue: String,
    },
    /// Stop leasing from the queue on every replica; enqueues still work (admin).
    Pause {
        /// The queue.
        queue: String,
    },
    /// Resume leasing (admin).
    Resume {
        /// The queue.
        queue: String,
    },
    /// Delete the queue's waiting and delayed jobs, and more if asked (admin; confirms).
    Purge {
        /// The queue.
        queue: String,
        /// Also delete completed jobs.
        #[arg(long)]
        include_completed: bool,
        /// Also delete dead-letter entries.
        #[arg(long)]
        include_dead: bool,
        /// Do not ask for confirmation.
        #[arg(short, long)]
        yes: bool,
    },
    /// Read or change the queue's config.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Delete the queue: every job in every state and its config (admin; confirms).
    Delete {
        /// The queue.
        queue: String,
        /// Also delete leased jobs (their workers' acks then answer NOT_FOUND); without it
        /// the server refuses while jobs are leased (FAILED_PRECONDITION).
        #[arg(long)]
        force: bool,
        /// Do not ask for confirmation.
        #[arg(short, long)]
        yes: bool,
    },
}

/// `jobwire queues config ...`.
#[derive(Debug, Subcommand)]
enum ConfigCommand {
    /// Print the queue's config (viewer).
    Get {
        /// The queue.
        queue: String,
    },
    /// Change the fields given as flags, nothing else (admin). The update mask is built from
    /// the flags; a flag inside default_backoff, retention or rate_limit changes only that
    /// part (the CLI reads the current config and sends the whole part back).
    Set(ConfigSet),
}

/// The fields of `QueueConfig` (the update mask's paths), for `--reset`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
#[value(rename_all = "snake_case")]
enum ConfigField {
    DefaultMaxAttempts,
    DefaultBackoff,
    DefaultTimeout,
    Retention,
    RateLimit,
    MaxActive,
}

impl ConfigField {
    fn path(self) -> &'static str {
        match self {
            ConfigField::DefaultMaxAttempts => "default_max_attempts",
            ConfigField::DefaultBackoff => "default_backoff",
            ConfigField::DefaultTimeout => "default_timeout",
            ConfigField::Retention => "retention",
            ConfigField::RateLimit => "rate_limit",
            ConfigField::MaxActive => "max_active",
        }
    }
}

/// Backoff kinds for `--default-backoff`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Kind {
    Fixed,
    Exponential,
}

/// `jobwire queues config set <queue> [flags]`.
#[derive(Debug, Args)]
struct ConfigSet {
    /// The queue.
    queue: String,
    /// max_attempts of jobs that set none (1 to 1000).
    #[arg(long)]
    default_max_attempts: Option<u32>,
    /// Backoff kind of jobs that set none.
    #[arg(long, value_enum)]
    default_backoff: Option<Kind>,
    /// The backoff's base delay (e.g. 1s).
    #[arg(long, value_parser = humantime::parse_duration)]
    default_backoff_delay: Option<Duration>,
    /// The backoff's jitter, 0 to 1.
    #[arg(long)]
    default_backoff_jitter: Option<f64>,
    /// The backoff's cap on each delay.
    #[arg(long, value_parser = humantime::parse_duration)]
    default_backoff_max_delay: Option<Duration>,
    /// Per-attempt timeout of jobs that set none (e.g. 30s).
    #[arg(long, value_parser = humantime::parse_duration)]
    default_timeout: Option<Duration>,
    /// Completed jobs kept (0 to 1000000).
    #[arg(long)]
    keep_completed: Option<u32>,
    /// Completed jobs older than this are removed.
    #[arg(long, value_parser = humantime::parse_duration)]
    completed_max_age: Option<Duration>,
    /// Dead-letter entries kept (0 to 1000000).
    #[arg(long)]
    keep_dead: Option<u32>,
    /// Dead-letter entries older than this are removed.
    #[arg(long, value_parser = humantime::parse_duration)]
    dead_max_age: Option<Duration>,
    /// Rate limit: at most this many job starts per --rate-limit-period.
    #[arg(long)]
    rate_limit_max: Option<u32>,
    /// Rate limit: the window (1ms to 1 day).
    #[arg(long, value_parser = humantime::parse_duration)]
    rate_limit_period: Option<Duration>,
    /// Most jobs leased at once across all workers.
    #[arg(long)]
    max_active: Option<u32>,
    /// Reset a field to the server's default (repeatable).
    #[arg(long, value_enum, value_name = "FIELD")]
    reset: Vec<ConfigField>,
}

/// Runs `jobwire queues ...`.
pub async fn run(a: QueuesArgs) -> Result<(), CliError> {
    let c = a.global.connect().await?;
    let out = a.global.output;
    match a.command {
        QueuesCommand::List => {
            let qs: Vec<QueueStatsView> = c
                .list_queues()
                .await?
                .iter()
                .map(QueueStatsView::from)
                .collect();
            print(out, &QueueList { queues: qs }, |l| queue_table(&l.queues))
        }
        QueuesCommand::Stats { queue } => {
            let s = QueueStatsView::from(&c.get_queue_stats(&queue).await?);
            print(out, &s, stats_pairs)
        }
        QueuesCommand::Pause { queue } => {
            c.pause_queue(&queue).await?;
            let r = Paused {
                queue,
                paused: true,
            };
            print(out, &r, |r| format!("Paused queue {}.\n", r.queue))
        }
        QueuesCommand::Resume { queue } => {
            c.resume_queue(&queue).await?;
            let r = Paused {
                queue,
                paused: false,
            };
            print(out, &r, |r| format!("Resumed queue {}.\n", r.queue))
        }
        QueuesCommand::Purge {
            queue,
            include_completed,
            include_dead,
            yes,
        } => {
            let mut what = String::from("waiting and delayed jobs");
            if include_completed {
                what.push_str(", completed jobs");
            }
            if include_dead {
                what.push_str(", dead-letter entries");
            }
            prompt::confirm(
                &format!("Delete every one of the {what} of queue {queue}?"),
                yes,
            )?;
            let deleted = c
                .purge_queue(&queue, include_completed, include_dead)
                .await?;
            let r = Purged { queue, deleted };
            print(out, &r, |r| {
                format!("Purged queue {}: {} jobs deleted.\n", r.queue, r.deleted)
            })
        }
        QueuesCommand::Config(ConfigCommand::Get { queue }) => {
            let cfg = QueueConfigView::from(&c.get_queue_config(&queue).await?);
            print(out, &cfg, config_pairs)
        }
        QueuesCommand::Config(ConfigCommand::Set(s)) => config_set(&c, s, out).await,
        QueuesCommand::Delete { queue, force, yes } => {
            prompt::confirm(
                &format!("Delete queue {queue} with all its jobs and its config?"),
                yes,
            )?;
            let r = c.delete_queue(&queue, force).await?;
            let d = Deleted {
                queue,
                waiting: r.waiting,
                delayed: r.delayed,
                active: r.active,
                completed: r.completed,
                dead: r.dead,
            };
            print(out, &d, |d| {
                format!(
                    "Deleted queue {}: {} waiting, {} delayed, {} active, {} completed, {} dead jobs.\n",
                    d.queue, d.waiting, d.delayed, d.active, d.completed, d.dead
                )
            })
        }
    }
}

/// `queues list` as JSON: `{"queues": [...]}`.
#[derive(Serialize)]
struct QueueList {
    queues: Vec<QueueStatsView>,
}

/// `queues pause|resume` as JSON.
#[derive(Serialize)]
struct Paused {
    queue: String,
    paused: bool,
}

/// `queues purge` as JSON.
#[derive(Serialize)]
struct Purged {
    queue: String,
    deleted: u64,
}

/// `queues delete` as JSON: the jobs deleted per state.
#[derive(Serialize)]
struct Deleted {
    queue: String,
    waiting: u64,
    delayed: u64,
    active: u64,
    completed: u64,
    dead: u64,
}

async fn config_set(c: &Client, s: ConfigSet, out: Format) -> Result<(), CliError> {
    let backoff_given = s.default_backoff.is_some()
        || s.default_backoff_delay.is_some()
        || s.default_backoff_jitter.is_some()
        || s.default_backoff_max_delay.is_some();
    let retention_given = s.keep_completed.is_some()
        || s.completed_max_age.is_some()
        || s.keep_dead.is_some()
        || s.dead_max_age.is_some();
    let rate_given = s.rate_limit_max.is_some() || s.rate_limit_period.is_some();
    let given = [
        (
            ConfigField::DefaultMaxAttempts,
            s.default_max_attempts.is_some(),
        ),
        (ConfigField::DefaultBackoff, backoff_given),
        (ConfigField::DefaultTimeout, s.default_timeout.is_some()),
        (ConfigField::Retention, retention_given),
        (ConfigField::RateLimit, rate_given),
        (ConfigField::MaxActive, s.max_active.is_some()),
    ];
    if let Some((f, _)) = given.iter().find(|(f, g)| *g && s.reset.contains(f)) {
        return Err(CliError::usage(format!(
            "--reset {}: that field is also being set; do one or the other",
            f.path()
        )));
    }
    let mut paths: Vec<&str> = given
        .iter()
        .filter(|(f, g)| *g || s.reset.contains(f))
        .map(|(f, _)| f.path())
        .collect();
    paths.dedup();
    if paths.is_empty() {
        return Err(CliError::usage(
            "queues config set: nothing to change; give a field flag or --reset FIELD (see --help)",
        ));
    }
    // The parts set field by field start from the current values.
    let current = if backoff_given || retention_given || rate_given {
        c.get_queue_config(&s.queue).await?
    } else {
        pb::QueueConfig::default()
    };
    let mut cfg = pb::QueueConfig {
        default_max_attempts: s.default_max_attempts,
        default_timeout: s.default_timeout.map(duration_to_pb),
        max_active: s.max_active,
        ..Default::default()
    };
    if backoff_given {
        let mut b = current.default_backoff.unwrap_or_default();
        if let Some(k) = s.default_backoff {
            b.kind = match k {
                Kind::Fixed => pb::BackoffKind::Fixed,
                Kind::Exponential => pb::BackoffKind::Exponential,
            } as i32;
        }
        if let Some(d) = s.default_backoff_delay {
            b.delay = Some(duration_to_pb(d));
        }
        if let Some(j) = s.default_backoff_jitter {
            b.jitter = j;
        }
        if let Some(d) = s.default_backoff_max_delay {
            b.max_delay = Some(duration_to_pb(d));
        }
        cfg.default_backoff = Some(b);
    }
    if retention_given {
        let mut r = current.retention.unwrap_or_default();
        if s.keep_completed.is_some() {
            r.keep_completed = s.keep_completed;
        }
        if let Some(d) = s.completed_max_age {
            r.completed_max_age = Some(duration_to_pb(d));
        }
        if s.keep_dead.is_some() {
            r.keep_dead = s.keep_dead;
        }
        if let Some(d) = s.dead_max_age {
            r.dead_max_age = Some(duration_to_pb(d));
        }
        cfg.retention = Some(r);
    }
    if rate_given {
        let mut r = current.rate_limit.unwrap_or_default();
        if let Some(m) = s.rate_limit_max {
            r.max = m;
        }
        if let Some(p) = s.rate_limit_period {
            r.period = Some(duration_to_pb(p));
        }
        cfg.rate_limit = Some(r);
    }
    let after = c.update_queue_config(&s.queue, cfg, &paths).await?;
    print(out, &QueueConfigView::from(&after), config_pairs)
}

fn dash<T: ToString>(v: Option<T>) -> String {
    v.map(|v| v.to_string()).unwrap_or_else(|| "-".into())
}

fn dur(v: Option<f64>) -> String {
    v.map(human).unwrap_or_else(|| "-".into())
}

/// A backoff for people: `exponential 1s (jitter 0.5, max 1m)`.
pub(super) fn backoff_text(b: Option<&BackoffView>) -> String {
    match b {
        None => "-".into(),
        Some(b) => {
            let mut s = format!(
                "{} {}",
                b.kind.as_deref().unwrap_or("unspecified"),
                dur(b.delay)
            );
            if b.jitter > 0.0 || b.max_delay.is_some() {
                s.push_str(&format!(" (jitter {}, max {})", b.jitter, dur(b.max_delay)));
            }
            s
        }
    }
}

/// An age for people, `-` when there is nothing to be old.
fn age(count: u64, secs: f64) -> String {
    if count == 0 {
        "-".into()
    } else {
        human(secs)
    }
}

fn queue_table(qs: &[QueueStatsView]) -> String {
    let mut t = Table::new(&[
        "QUEUE",
        "WAITING",
        "DELAYED",
        "ACTIVE",
        "COMPLETED",
        "DEAD",
        "OLDEST",
        "PAUSED",
        "WORKERS",
    ])
    .flex(0);
    for q in qs {
        t.row(vec![
            q.queue.clone(),
            q.waiting.to_string(),
            q.delayed.to_string(),
            q.active.to_string(),
            q.completed.to_string(),
            q.dead.to_string(),
            age(q.waiting, q.oldest_waiting_age),
            if q.paused { "yes" } else { "no" }.into(),
            q.workers_connected.to_string(),
        ]);
    }
    t.render()
}

fn stats_pairs(s: &QueueStatsView) -> String {
    let mut rows = vec![
        ("queue", s.queue.clone()),
        ("paused", if s.paused { "yes" } else { "no" }.into()),
        ("waiting", s.waiting.to_string()),
        ("delayed", s.delayed.to_string()),
        ("active", s.active.to_string()),
        ("completed", s.completed.to_string()),
        ("dead", s.dead.to_string()),
        ("oldest_waiting_age", age(s.waiting, s.oldest_waiting_age)),
        ("oldest_dead_age", age(s.dead, s.oldest_dead_age)),
        ("workers", s.workers_connected.to_string()),
    ];
    rows.extend(config_rows(&s.config));
    pairs(&rows)
}

fn config_rows(c: &QueueConfigView) -> Vec<(&'static str, String)> {
    let r = c.retention.as_ref();
    vec![
        ("default_max_attempts", dash(c.default_max_attempts)),
        ("default_backoff", backoff_text(c.default_backoff.as_ref())),
        ("default_timeout", dur(c.default_timeout)),
        ("keep_completed", dash(r.and_then(|r| r.keep_completed))),
        (
            "completed_max_age",
            dur(r.and_then(|r| r.completed_max_age)),
        ),
        ("keep_dead", dash(r.and_then(|r| r.keep_dead))),
        ("dead_max_age", dur(r.and_then(|r| r.dead_max_age))),
        (
            "rate_limit",
            match &c.rate_limit {
                None => "-".into(),
                Some(r) => format!("{} per {}", r.max, dur(r.period)),
            },
        ),
        ("max_active", dash(c.max_active)),
    ]
}

fn config_pairs(c: &QueueConfigView) -> String {
    pairs(&config_rows(c))
}
