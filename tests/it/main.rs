//! jobwire's integration tests: one binary, real redis-server processes, real gRPC over TCP.

mod harness;
mod limits;
mod logs;
mod metrics;

mod core_flow;
mod dead_letters;
mod retries;
mod shutdown;
mod validation;
