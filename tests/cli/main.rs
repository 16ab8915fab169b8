//! The operator CLI's tests: the real `jobwire` binary against a real `jobwire serve` (its
//! own embedded redis-server, free loopback ports), checking stdout (the JSON parsed), stderr
//! and exit codes. The state the CLI changed is checked through the gRPC API (the Rust SDK),
//! not through the CLI itself.

#[allow(dead_code)] // test PKI: the TLS test uses part of it
#[path = "../support/certs.rs"]
mod certs;
mod harness;

mod auth;
mod dlq;
mod jobs;
mod lists;
mod queues;
mod readme;
mod runtime;
mod terminal;
mod tls;
mod typos;
