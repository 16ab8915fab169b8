//! The operator's command line: `jobwire queues|jobs|dlq|workers|token ...` (docs/cli.md).
//!
//! Every command except `token` is a gRPC client of a running server, built on the Rust SDK
//! (`jobwire-client`): it is authorized, limited and audited like any other client and never
//! touches Redis. Data goes to stdout (`-o table|json|yaml`), messages, prompts and the
//! progress bar to stderr.
//!
//! - `global`: the connection flags (`--server`, `--token`, `--tls-*`) and `-o`.
//! - `exit`: errors and the exit codes scripts test (0 ok, 1 error, 2 usage, 3 not found).
//! - `view`: the JSON/YAML shapes (serde structs; the stable script interface).
//! - `table`, `output`: tables that fit 100 columns, and printing in the chosen format.
//! - `known`: the unknown-queue check (ListQueues) of queue-scoped commands.
//! - `time`, `prompt`: RFC 3339 or relative times; confirmations on a terminal only.
//! - `queues` (+ `queue_config`), `jobs` (+ `jobs_list`), `dlq` (+ `bulk`), `workers`,
//!   `token`: one file per command group.

mod bulk;
mod dlq;
mod exit;
mod global;
mod jobs;
mod jobs_list;
mod known;
mod output;
mod prompt;
mod queue_config;
mod queues;
mod table;
mod time;
mod token;
mod view;
mod workers;

use clap::Subcommand;

use exit::CliError;
pub use global::hoist_global_flags;

/// The operator commands, flattened into the top-level `jobwire` command beside `serve`
/// and `bench`.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Queues: list, stats, pause, resume, purge, config, delete.
    Queues(queues::QueuesArgs),
    /// Jobs: get one, enqueue one, list a state's jobs.
    Jobs(jobs::JobsArgs),
    /// The dead-letter queue: list, show, replay, delete (by id or by filter).
    Dlq(dlq::DlqArgs),
    /// Worker streams of every replica.
    Workers(workers::WorkersArgs),
    /// Bearer tokens for the auth file (`token new`); needs no server.
    Token(token::TokenArgs),
}

/// Runs an operator command and returns the process exit code (errors are printed on
/// stderr, one line each).
pub async fn run(command: Command) -> i32 {
    let server = match &command {
        Command::Queues(a) => Some(a.global.server.clone()),
        Command::Jobs(a) => Some(a.global.server.clone()),
        Command::Dlq(a) => Some(a.global.server.clone()),
        Command::Workers(a) => Some(a.global.server.clone()),
        Command::Token(_) => None,
    };
    let r = match command {
        Command::Queues(a) => queues::run(a).await,
        Command::Jobs(a) => jobs::run(a).await,
        Command::Dlq(a) => dlq::run(a).await,
        Command::Workers(a) => workers::run(a).await,
        Command::Token(a) => {
            // Unchanged from before the CLI: a bad --id exits 64 (EX_USAGE).
            return match token::run(&a) {
                Ok(out) => {
                    print!("{out}");
                    0
                }
                Err(e) => {
                    eprintln!("jobwire token: {e}");
                    64
                }
            };
        }
    };
    match r {
        Ok(()) => exit::OK,
        Err(e) => {
            let text = e.to_string();
            eprintln!("jobwire: {text}");
            let hint = match (exit::hint(&text), &server) {
                (Some(h), _) => Some(h),
                (None, Some(server)) => exit::http_port_hint(&e, server).await,
                (None, None) => None,
            };
            if let Some(h) = hint {
                eprintln!("hint: {h}");
            }
            e.exit_code()
        }
    }
}
