//! jobwire's security tests: real servers over real TLS (certificates made by the test),
//! bearer tokens and client certificates, every refusal checked against Redis byte for byte.

#[allow(dead_code)] // shared with the it and fault suites, which use more of it
#[path = "../it/harness.rs"]
mod harness;
#[allow(dead_code)] // the bad-input suites' snapshot and refusal helpers
#[path = "../it/refusal.rs"]
mod refusal;
#[allow(dead_code)] // the Redis Cluster topology the harness can run on
#[path = "../support/topology/mod.rs"]
mod topology;

#[allow(dead_code)] // test PKI: each suite uses part of it
#[path = "../support/certs.rs"]
mod certs;
#[allow(dead_code)] // TLS servers and clients, shared by the TLS and auth tests
mod tls_harness;

mod bench_tls;
mod conn_info;
mod rotation;
mod startup;
mod tls;

mod secured;

mod audit;
mod auth_startup;
mod cert_principals;
mod conn_deadlines;
#[allow(dead_code)] // the child-process server of the connection tests
mod conn_harness;
mod conn_idle;
mod dashboard;
mod forged_log;
#[allow(dead_code)] // each abuse test uses part of it
mod h2raw;
mod http_limits;
mod limits_age;
mod limits_h2;
mod limits_idle;
mod limits_memory;
mod limits_streams;
mod metrics_port;
mod patterns;
mod reload;
mod roles;
mod tokens;
