//! The `jobwire` binary: parse flags, set up logging, bind, run until SIGTERM/SIGINT.

use anyhow::Context;
use clap::Parser;
use jobwire::config::{Cli, Command};

#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // Global operator flags may come before the command group (docs/cli.md).
    let cli = Cli::parse_from(jobwire::cli::hoist_global_flags(
        std::env::args_os().collect(),
    ));
    match cli.command {
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
