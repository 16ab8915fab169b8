//! `jobwire queues list|stats|pause|resume|purge|delete` (and `config`, in `queue_config`).

use clap::{Args, Subcommand};
use serde::Serialize;

use super::global::GlobalArgs;
use super::known::require_queue;
use super::output::print;
use super::queue_config::ConfigCommand;
use super::table::{pairs, Table};
use super::time::human;
use super::view::QueueStatsView;
use super::{prompt, CliError};

/// `jobwire queues ...`.
#[derive(Debug, Args)]
pub struct QueuesArgs {
    #[command(flatten)]
    pub(super) global: GlobalArgs,
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
    /// Stop leasing from the queue on every replica; enqueues still work (admin). An
    /// unknown queue is refused (exit 3) unless --create.
    Pause {
        /// The queue.
        queue: String,
        /// Pause a queue that does not exist yet (it is created, paused, so that its first
        /// jobs wait until `queues resume`).
        #[arg(long)]
        create: bool,
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
            require_queue(&c, &queue).await?;
            let s = QueueStatsView::from(&c.get_queue_stats(&queue).await?);
            print(out, &s, stats_pairs)
        }
        QueuesCommand::Pause { queue, create } => {
            if !create {
                require_queue(&c, &queue).await?;
            }
            c.pause_queue(&queue).await?;
            let r = Paused {
                queue,
                paused: true,
            };
            print(out, &r, |r| format!("Paused queue {}.\n", r.queue))
        }
        QueuesCommand::Resume { queue } => {
            require_queue(&c, &queue).await?;
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
            require_queue(&c, &queue).await?;
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
        QueuesCommand::Config(cmd) => super::queue_config::run(&c, cmd, out).await,
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
        ("cancelled", s.cancelled.to_string()),
        ("expired", s.expired.to_string()),
        ("groups_waiting", s.groups_waiting.to_string()),
        ("oldest_waiting_age", age(s.waiting, s.oldest_waiting_age)),
        ("oldest_dead_age", age(s.dead, s.oldest_dead_age)),
        ("workers", s.workers_connected.to_string()),
    ];
    rows.extend(super::queue_config::config_rows(&s.config));
    pairs(&rows)
}
