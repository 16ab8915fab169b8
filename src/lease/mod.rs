//! Stream sessions and everything that keeps leases moving: one lease loop per queue per
//! replica that serves all of this replica's streams on the queue (leasing as many jobs in one
//! script call as the streams have free credits), one settle lane per queue and kind that
//! coalesces the acks and fails of all streams into one script call (group commit), one
//! enqueue lane per queue that does the same for concurrent unary Enqueues, batched
//! renewal of live streams' leases, the reaper, and wake-ups over Redis pub/sub with a slow
//! poll as safety net.

mod background;
pub mod enqueue_commit;
mod hub;
mod outbound;
mod queue_loop;
mod report;
mod retire;
mod session;
mod settle;
mod settle_lease;
mod unsent;
mod wakeup;

pub use background::DEFAULT_SWEEP_RATE;
pub use enqueue_commit::{EnqueueLanes, MAX_COMMIT_JOBS};
pub use hub::{Hub, HubConfig};
pub use outbound::OutboundStream;
pub use report::REPORT_TTL_INTERVALS;
pub use session::{CancelLease, Handling, Outbound, Session, Settled, MAX_CREDITS};
pub use settle::{Settles, MAX_SETTLE_BATCH};
pub use settle_lease::StreamAck;
pub use wakeup::EchoCredit;
