//! The `jobwire` binary: parse flags, build the async runtime (`--worker-threads`), set up
//! logging, bind, run until SIGTERM/SIGINT.

use anyhow::Context;
use clap::Parser;
use jobwire::config::{Cli, Command, RuntimeArgs};

#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> anyhow::Result<()> {
    // Global operator flags may come before the command group (docs/cli.md).
    let cli = Cli::parse_from(jobwire::cli::hoist_global_flags(
        std::env::args_os().collect(),
    ));
    let runtime = match &cli.command {
        Command::Serve(cfg) => cfg.runtime.clone(),
        Command::Bench(args) => args.runtime.clone(),
        Command::Operator(_) => RuntimeArgs::default(),
    };
    // The command runs as a task of the runtime, not on the thread that started it: with
    // `--worker-threads 1` every future of the process then shares the one worker thread. On
    // the starting thread, `bench`'s one-at-a-time calls each waited for a wake-up from the
    // worker that drives the connection, and woke it in turn (two thread hand-offs a call).
    let task = runtime
        .build()
        .context("cannot start the async runtime")?
        .block_on(async { tokio::spawn(run(cli.command)).await });
    match task {
        Ok(result) => result,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(e) => Err(e).context("the command's task was cancelled"),
    }
}

async fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Serve(cfg) => {
            if cfg.print_config {
                print!("{}", cfg.effective());
                return Ok(());
            }
            if let Err(e) = cfg.validate() {
                eprintln!("jobwire: invalid configuration: {e}");
                std::process::exit(64);
            }
            jobwire::telemetry::init(cfg.log_format);
            let grpc = tokio::net::TcpListener::bind(cfg.grpc_addr)
                .await
                .with_context(|| {
                    format!("cannot listen for gRPC on --grpc-addr {}", cfg.grpc_addr)
                })?;
            let http = tokio::net::TcpListener::bind(cfg.http_addr)
                .await
                .with_context(|| {
                    format!("cannot listen for HTTP on --http-addr {}", cfg.http_addr)
                })?;
            let signal = async {
                let which = jobwire::shutdown::signal().await;
                tracing::info!(signal = which, "signal received");
                jobwire::shutdown::exit_on_second_signal();
            };
            jobwire::run(cfg, grpc, http, signal).await
        }
        Command::Bench(args) => jobwire::bench::run(args).await,
        Command::Operator(cmd) => std::process::exit(jobwire::cli::run(cmd).await),
    }
}
