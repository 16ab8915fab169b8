//! gRPC adapters only: each handler validates and converts its request (`convert.rs`),
//! calls the store or the lease hub, and converts the answer. Errors become `Status` in
//! `status.rs` and nowhere else.

mod cancel;
pub mod codec;
mod convert;
mod dead_letter_service;
mod group_service;
mod job_service;
pub mod limits;
mod list_jobs;
mod list_workers;
pub mod message_size;
mod progress;
mod queue_service;
pub mod request_budget;
mod status;
mod worker_args;
mod worker_service;

pub use convert::ApiLimits;
pub use dead_letter_service::DeadLetterApi;
pub use group_service::GroupApi;
pub use job_service::JobApi;
pub use message_size::{max_message_bytes, MessageSizeLayer};
pub use queue_service::QueueApi;
pub use request_budget::{RequestBudget, RequestBudgetLayer};
pub use status::ERROR_DOMAIN;
pub use worker_service::{WorkerApi, WorkerService};

/// The generated `jobwire.v1` messages, servers and clients.
#[allow(clippy::large_enum_variant, missing_docs)]
pub mod pb {
    tonic::include_proto!("jobwire.v1");

    /// The encoded descriptor set of `jobwire.v1`, for server reflection.
    pub const FILE_DESCRIPTOR_SET: &[u8] =
        tonic::include_file_descriptor_set!("jobwire_descriptor");
}
