//! `jobwire queues config get|set`: a queue's config, and its rendering for people. `set`
//! builds the request's update mask from the flags given.

use std::time::Duration;

use clap::{Args, Subcommand, ValueEnum};
use jobwire_client::{pb, Client};

use super::global::Format;
use super::output::print;
use super::table::pairs;
use super::time::{duration_to_pb, human};
use super::view::{BackoffView, QueueConfigView};
use super::CliError;
use crate::jobs::ConfigField;

/// `jobwire queues config ...`.
#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Print the queue's config (viewer).
    Get {
        /// The queue.
        queue: String,
    },
    /// Change the fields given as flags, nothing else (admin). The update mask is built from
    /// the flags; a flag inside default_backoff, retention or rate_limit changes only that
    /// part (the CLI reads the current config and sends the whole part back). An unknown
    /// queue is refused (exit 3) unless --create.
    Set(ConfigSet),
}

/// `--reset FIELD`: one of the update mask's paths (`default_max_attempts`, ...), as the
/// server names them.
fn config_field(path: &str) -> Result<ConfigField, String> {
    ConfigField::parse(path).ok_or_else(|| {
        let all: Vec<&str> = ConfigField::ALL.iter().map(|f| f.as_str()).collect();
        format!("not a config field; one of {}", all.join(", "))
    })
}

/// Backoff kinds for `--default-backoff`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Kind {
    Fixed,
    Exponential,
}

/// `jobwire queues config set <queue> [flags]`.
#[derive(Debug, Args)]
pub struct ConfigSet {
    /// The queue.
    queue: String,
    /// Configure a queue that does not exist yet (it is created with this config, which
    /// its first jobs then get: configure before the first enqueue).
    #[arg(long)]
    create: bool,
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
    /// Reset a field to the server's default (repeatable): default_max_attempts,
    /// default_backoff, default_timeout, retention, rate_limit or max_active.
    #[arg(long, value_parser = config_field, value_name = "FIELD")]
    reset: Vec<ConfigField>,
}

/// Runs `jobwire queues config ...`.
pub async fn run(c: &Client, cmd: ConfigCommand, out: Format) -> Result<(), CliError> {
    match cmd {
        ConfigCommand::Get { queue } => {
            super::known::require_queue(c, &queue).await?;
            let cfg = QueueConfigView::from(&c.get_queue_config(&queue).await?);
            print(out, &cfg, config_pairs)
        }
        ConfigCommand::Set(s) => config_set(c, s, out).await,
    }
}

async fn config_set(c: &Client, s: ConfigSet, out: Format) -> Result<(), CliError> {
    if !s.create {
        super::known::require_queue(c, &s.queue).await?;
    }
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
            f.as_str()
        )));
    }
    let mut paths: Vec<&str> = given
        .iter()
        .filter(|(f, g)| *g || s.reset.contains(f))
        .map(|(f, _)| f.as_str())
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

pub(super) fn config_rows(c: &QueueConfigView) -> Vec<(&'static str, String)> {
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
        ("group_max_active", dash(c.group_max_active)),
        (
            "group_rate_limit",
            match &c.group_rate_limit {
                None => "-".into(),
                Some(r) => format!("{} per {} per group", r.max, dur(r.period)),
            },
        ),
        ("cancel_grace", dur(c.cancel_grace)),
        (
            "dead_letter_expired",
            if c.dead_letter_expired { "yes" } else { "no" }.into(),
        ),
    ]
}

fn config_pairs(c: &QueueConfigView) -> String {
    pairs(&config_rows(c))
}
