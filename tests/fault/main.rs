//! jobwire's fault tests: real processes (redis-server, the `jobwire` binary, worker
//! children) killed and restarted, each test a story. `procs.rs` is the process harness; the
//! in-process harness of the `it` suite is shared for servers that need not die.

#[allow(dead_code)]
#[path = "../it/harness.rs"]
mod harness;
mod procs;
#[allow(dead_code)]
#[path = "../support/topology/mod.rs"]
mod topology;

mod cluster_failover;
mod cluster_wait_failover;
mod ctrl_c;
mod durability;
mod enqueue_once;
mod eviction;
mod killed_worker;
mod leases;
mod lost_replies;
mod orphan;
mod readonly;
mod redis_outage;
mod release_retry;
mod replicas;
mod runaway_queues;
mod soak;
mod startup;
mod tls;
mod topologies;
mod unconfirmed_calls;
mod wait_replicas;
