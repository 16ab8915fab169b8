//! jobwire's integration tests: one binary, real redis-server processes, real gRPC over TCP.

mod bench_smoke;
mod cluster;
#[allow(dead_code)] // shared with the fault suite, which uses more of it
mod harness;
mod idle_loops;
mod limits;
mod logs;
mod message_limits;
mod metrics;
mod metrics_zero;
#[allow(dead_code)] // the Redis Cluster and Sentinel topologies, shared with the fault suite
#[path = "../support/topology/mod.rs"]
mod topology;

mod ack_lease;
mod bad_input;
mod bad_input_workers;
mod batch_items;
mod big_payloads;
mod cancel;
mod cancel_bulk;
mod cancel_order;
mod coalesce;
mod core_flow;
mod dead_letters;
mod declared_keys;
mod due_later;
mod due_spread;
mod early_wake;
mod enqueue_commit;
mod error_history;
mod error_text;
mod expiry;
mod expiry_starts;
mod flow_control;
mod functions;
mod groups;
mod groups_api;
mod list_jobs;
mod list_workers;
mod model;
mod progress;
mod queue_lifecycle;
mod queue_turns;
mod refusal;
mod repeated_settles;
mod replay_once;
mod results;
mod retention_age;
mod retries;
mod script_time;
mod shutdown;
mod starvation;
mod storage;
mod validation;
mod worker_release;
