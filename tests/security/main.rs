//! jobwire's security tests: real servers over real TLS (certificates made by the test),
//! bearer tokens and client certificates, every refusal checked against Redis byte for byte.

#[allow(dead_code)] // shared with the it and fault suites, which use more of it
#[path = "../it/harness.rs"]
mod harness;
#[allow(dead_code)] // the Redis Cluster topology, used by the harness
#[path = "../support/topology/mod.rs"]
mod topology;
