//! The domain error every layer below the gRPC adapters returns. `api/status.rs` holds the
//! one mapping to `tonic::Status`; nothing here knows about tonic or redis types.

use crate::store::StoreError;

/// Everything a jobwire operation can fail with, as a client should see it.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A request field is malformed or out of range: INVALID_ARGUMENT with a field violation.
    #[error("invalid {field}: {reason}")]
    InvalidArgument {
        /// The field path, e.g. `job.backoff.jitter`.
        field: String,
        /// What is wrong, with the limit.
        reason: String,
    },
    /// A payload, batch or message is over its limit: RESOURCE_EXHAUSTED with a field
    /// violation.
    #[error("{field} too large: {reason}")]
    TooLarge {
        /// The field path, e.g. `job.payload`.
        field: String,
        /// The size and the limit.
        reason: String,
    },
    /// No such job (or not in the state asked for, e.g. not dead): NOT_FOUND.
    #[error("job {id:?} not found in queue {queue:?}")]
    JobNotFound {
        /// The queue.
        queue: String,
        /// The job id.
        id: String,
    },
    /// The lease token is not the job's current one (the lease expired, the job was leased
    /// again or settled): FAILED_PRECONDITION. The call changed nothing.
    #[error("lease lost for job {id:?} (the job is {state})")]
    LeaseLost {
        /// The job id.
        id: String,
        /// The job's current state.
        state: String,
    },
    /// The request would create a queue past the server's queue limit (`--max-queues`):
    /// RESOURCE_EXHAUSTED with a quota violation. Nothing was written.
    #[error("the server's limit of {limit} queues is reached; delete unused queues (DeleteQueue) or raise --max-queues")]
    TooManyQueues {
        /// The limit.
        limit: usize,
    },
    /// No such queue: NOT_FOUND.
    #[error("queue {queue:?} not found")]
    QueueNotFound {
        /// The queue.
        queue: String,
    },
    /// The queue has leased jobs and the deletion was not forced: FAILED_PRECONDITION.
    #[error("queue {queue:?} has {leased} leased jobs; wait for them or delete with force")]
    QueueBusy {
        /// The queue.
        queue: String,
        /// Jobs leased.
        leased: u64,
    },
    /// The job is leased (ACTIVE) and the call needs it not to be (DeleteJob):
    /// FAILED_PRECONDITION. Nothing changed.
    #[error("job {id:?} of queue {queue:?} is active (leased); cancel it first (CancelJob) and delete it once it is cancelled")]
    JobActive {
        /// The queue.
        queue: String,
        /// The job id.
        id: String,
    },
    /// Redis is unreachable, or the server is shutting down: UNAVAILABLE, retry with backoff.
    #[error("unavailable: {0}")]
    Unavailable(String),
    /// `--redis-wait-replicas`: the write was made on the master but too few replicas
    /// acknowledged it in time: UNAVAILABLE (reason NOT_REPLICATED), safe to retry.
    #[error("not replicated: {0}")]
    NotReplicated(String),
    /// Redis's `maxmemory-policy` evicts and `--allow-eviction` is off: UNAVAILABLE (reason
    /// REDIS_EVICTS), the message names the policy and the fix. Nothing was written.
    #[error("{0}")]
    Evicting(String),
    /// Redis reached `maxmemory` and refuses writes: RESOURCE_EXHAUSTED, retry once jobs are
    /// consumed or Redis has more memory. The call changed nothing.
    #[error("store full: {0}")]
    StoreFull(String),
    /// No credentials, malformed or unknown ones, or ones revoked by an auth-file reload:
    /// UNAUTHENTICATED. The message says which, never echoing a secret.
    #[error("unauthenticated: {0}")]
    Unauthenticated(String),
    /// The principal is authenticated but holds no role that allows the call on the queue:
    /// PERMISSION_DENIED, naming the queue and the roles that would allow it.
    #[error("{}", denied_message(principal, rpc, queue.as_deref(), roles))]
    PermissionDenied {
        /// The principal's name.
        principal: String,
        /// The RPC (`Enqueue`, `PurgeQueue`, ...).
        rpc: &'static str,
        /// The queue; `None` for a call that names none (ListQueues).
        queue: Option<String>,
        /// The roles that would allow it: `producer`, `viewer or admin`.
        roles: String,
    },
    /// A Subscribe past an abuse limit (`flag`: at most `limit` worker streams per
    /// `scope`, "connection" or "principal"): RESOURCE_EXHAUSTED with a quota violation.
    /// The stream was not opened; nothing was written.
    #[error(
        "at most {limit} worker streams per {scope} (--{flag}); close a stream or raise the limit"
    )]
    TooManyStreams {
        /// The limit.
        limit: u32,
        /// What is counted: "connection" or "principal".
        scope: &'static str,
        /// The flag that sets the limit.
        flag: &'static str,
    },
    /// A request message's unfinished bytes would pass the budget of buffered request bytes
    /// (`flag`: at most `limit` bytes per `scope`, "connection" or "server"):
    /// RESOURCE_EXHAUSTED with a quota violation and a retry delay. The call was not run.
    #[error(
        "the server holds at most {limit} bytes of unfinished request messages per {scope} (--{flag}); retry later or send smaller messages"
    )]
    RequestMemory {
        /// The limit, bytes.
        limit: u64,
        /// What is counted: "connection" or "server".
        scope: &'static str,
        /// The flag that sets the limit.
        flag: &'static str,
    },
    /// The server ended a worker stream (idle past `--heartbeat-timeout`, or its connection
    /// past `--max-connection-age` and its grace): UNAVAILABLE, reconnect.
    #[error("the server closed the stream: {0}")]
    StreamClosed(String),
    /// A bug or corrupt data: INTERNAL; the detail is logged, not sent.
    #[error("internal error: {0}")]
    Internal(String),
}

fn denied_message(principal: &str, rpc: &str, queue: Option<&str>, roles: &str) -> String {
    match queue {
        Some(q) => format!(
            "permission denied: principal {principal:?} may not call {rpc} on queue {q:?}: it needs role {roles} on it"
        ),
        None => format!(
            "permission denied: principal {principal:?} may not call {rpc}: it needs role {roles} on at least one queue"
        ),
    }
}

impl Error {
    /// Shorthand for [`Error::InvalidArgument`].
    pub fn invalid(field: impl Into<String>, reason: impl Into<String>) -> Error {
        Error::InvalidArgument {
            field: field.into(),
            reason: reason.into(),
        }
    }
}

impl From<&StoreError> for Error {
    fn from(e: &StoreError) -> Error {
        match e {
            StoreError::Unavailable(e) => Error::Unavailable(e.to_string()),
            StoreError::OutOfMemory(e) => Error::StoreFull(e.to_string()),
            StoreError::Redis(e) => Error::Internal(e.to_string()),
            StoreError::Decode(msg) => Error::Internal(msg.clone()),
            e @ StoreError::Evicting { .. } => Error::Evicting(e.to_string()),
            e @ (StoreError::NotReplicated { .. } | StoreError::TooFewReplicas { .. }) => {
                Error::NotReplicated(e.to_string())
            }
            StoreError::Config(msg) => Error::Internal(msg.clone()),
            StoreError::TooManyQueues { limit } => Error::TooManyQueues { limit: *limit },
        }
    }
}

impl From<StoreError> for Error {
    fn from(e: StoreError) -> Error {
        Error::from(&e)
    }
}
