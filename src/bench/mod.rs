//! `jobwire bench`: a load generator for a running jobwire server, written against the
//! crate's own generated gRPC client. It measures what the BullMQ harness in
//! `../shared/bench` measures (enqueue, end-to-end, idle pickup latency, failure path) plus
//! the server's RSS under many held leases, reads the server's and Redis's CPU from `/proc`,
//! prints a table, and writes JSON in the harness's shape so `report.mjs --compare` can
//! print jobwire / BullMQ ratios.
//!
//! - [`args`]: the flags.
//! - `runner`: the plan, interleaved runs, noisy-run redos, output.
//! - `client`: channel, job specs, fresh queue names, worker streams.
//! - `enqueue`, `workers`, `latency`, `rate`: the scenarios (`workers` also has the drain).
//! - `cpu`: `/proc` readings; `nodes`: every Redis master's `INFO cpu` (`--redis-url`);
//!   `report`: tables and JSON.

mod args;
mod client;
mod cpu;
mod enqueue;
mod latency;
mod nodes;
mod rate;
mod report;
mod runner;
mod workers;

pub use args::BenchArgs;
pub use runner::run;
