//! Redis only: the key schema (`keys.rs`), one Lua script per job state transition
//! (`scripts/*.lua`, loaded once and called by SHA in `scripts.rs`), the decoding of their
//! replies (`codec.rs`), and [`Store`], whose methods are named after the scripts they call.
//! Beside the queues, two global keys (`registry.rs`): the queue registry (capped by
//! `--max-queues`) and the due index the reaper follows; no queue script writes them. And
//! the replicas' worker-stream reports (`workers.rs`), global keys too.
//!
//! Invariants: every state change is exactly one script call, so a crash at any instant
//! leaves each job in exactly one state; all of a queue's keys share the hash tag `{queue}`;
//! the scripts take the time from Redis `TIME`.

mod ack_lease;
mod cancel;
mod client;
mod codec;
mod conn;
mod dead;
mod due_later;
mod durability;
mod enqueue;
mod error;
mod eviction;
mod functions;
mod groups;
mod health;
mod keys;
mod leases;
mod list;
mod progress;
mod queues;
mod registry;
mod replica_gate;
mod scripts;
mod stats;
mod target;
mod types;
mod wake;
mod workers;

pub use cancel::{CancelFilter, CancelNotice, CancelOutcome, CancelPage, DeletedJob};
pub use client::{Store, CALL_BYTES};
pub use dead::{DeadPage, DeadSelector};
pub use durability::WaitReplicas;
pub use error::StoreError;
pub use groups::{GroupInfo, GroupPage};
pub use keys::{due_key, shard_wake_channel, wake_channel, DUE_KEYS, DUE_SHARDS, WAKE_PATTERN};
pub use leases::{lost_call_after, new_lease_call_id};
pub use list::{JobsCursor, JobsFilter, JobsPage, LIST_PAGE_BYTES};
pub use registry::{DueEntry, DEFAULT_MAX_QUEUES, INTENT_AHEAD};
pub use scripts::script_hashes;
pub use stats::QueueStats;
pub use target::check_redis_url;
pub use types::{
    AckInput, AckItem, AckOutcome, DeleteQueue, DeletedQueue, EnqueueOutcome, FailItem,
    FailOutcome, LeaseBatch, Limit, ReapReport, ReapedJob, Renewed, Settle,
};
pub use wake::{WakeEvent, WakeListener, RESUBSCRIBE_EVERY};
