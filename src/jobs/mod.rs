//! The job domain: what a job is, its states, options and history, independent of gRPC and
//! of Redis. `api` converts protobuf messages into these types (validating them), and
//! `store` persists them; neither depends on the other.

mod group_config;
mod model;
mod queue_config;
mod queue_name;
mod trace;
mod workers;

pub use group_config::{GroupConfig, GroupField};
pub use model::{
    AttemptError, Backoff, BackoffKind, DeadFilter, DeadReason, Disposition, Job, JobData,
    JobState, LeasedJob, NewJob, ProgressReport,
};
pub use queue_config::{
    ConfigField, QueueConfig, RateLimit, Retention, DEFAULT_CANCEL_GRACE_MS,
    DEFAULT_DEAD_MAX_AGE_MS, DEFAULT_KEEP_COMPLETED, DEFAULT_KEEP_DEAD, MAX_CANCEL_GRACE_MS,
};
pub use queue_name::QueueName;
pub use trace::trace_id;
pub use workers::{ReplicaWorkers, WorkerStreamInfo, MAX_LISTED_LEASES};
