//! `jobwire workers list [--queue Q]`: every replica's worker streams (ListWorkers).

use std::time::SystemTime;

use clap::{Args, Subcommand};
use serde::Serialize;

use super::global::GlobalArgs;
use super::output::print;
use super::table::Table;
use super::time::relative;
use super::view::{ReplicaView, WorkerStreamView};
use super::CliError;

/// `jobwire workers ...`.
#[derive(Debug, Args)]
pub struct WorkersArgs {
    #[command(flatten)]
    pub(super) global: GlobalArgs,
    #[command(subcommand)]
    command: WorkersCommand,
}

/// Subcommands of `jobwire workers`.
#[derive(Debug, Subcommand)]
enum WorkersCommand {
    /// The worker streams of every replica on the same Redis: replica, stream, worker id,
    /// queues, free credits, held leases, connected since, last heard (viewer). Other
    /// replicas' streams come from their last report (up to 5 s old).
    List {
        /// Only the streams that lease from this queue.
        #[arg(long)]
        queue: Option<String>,
    },
}

/// `workers list` as JSON.
#[derive(Serialize)]
struct WorkerList {
    streams: Vec<WorkerStreamView>,
    replicas: Vec<ReplicaView>,
    /// When the list was read (for the table's ages; not printed).
    #[serde(skip)]
    now: Option<SystemTime>,
}

/// Runs `jobwire workers ...`.
pub async fn run(a: WorkersArgs) -> Result<(), CliError> {
    match a.command {
        WorkersCommand::List { queue } => {
            let c = a.global.connect().await?;
            if let Some(q) = &queue {
                super::known::require_queue(&c, q).await?;
            }
            let r = c.list_workers(queue.as_deref().unwrap_or_default()).await?;
            let l = WorkerList {
                streams: r.streams.iter().map(WorkerStreamView::from).collect(),
                replicas: r.replicas.iter().map(ReplicaView::from).collect(),
                now: Some(SystemTime::now()),
            };
            print(a.global.output, &l, table)
        }
    }
}

fn table(l: &WorkerList) -> String {
    let now = l.now.unwrap_or_else(SystemTime::now);
    let mut t = Table::new(&[
        "REPLICA",
        "STREAM",
        "WORKER",
        "QUEUES",
        "CREDITS",
        "HELD",
        "CONNECTED",
        "LAST_HEARD",
    ])
    .flex(3);
    for w in &l.streams {
        t.row(vec![
            w.replica_id.clone(),
            w.stream_id.clone(),
            if w.draining {
                format!("{} (draining)", w.worker_id)
            } else {
                w.worker_id.clone()
            },
            w.queues.join(","),
            w.credits.to_string(),
            w.held_leases.to_string(),
            relative(w.connect_time.as_deref(), now),
            relative(w.last_heard_time.as_deref(), now),
        ]);
    }
    let mut s = t.render();
    let reps: Vec<String> = l
        .replicas
        .iter()
        .map(|r| {
            if r.answered {
                format!("{} (live)", r.replica_id)
            } else {
                format!(
                    "{} (report {})",
                    r.replica_id,
                    relative(r.snapshot_time.as_deref(), now)
                )
            }
        })
        .collect();
    s.push_str(&format!(
        "{} streams; replicas: {}\n",
        l.streams.len(),
        if reps.is_empty() {
            "-".to_owned()
        } else {
            reps.join(", ")
        }
    ));
    s
}
