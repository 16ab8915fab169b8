//! Stream sessions and everything that keeps leases moving: one lease loop per queue per
//! replica that serves all of this replica's streams on the queue (leasing as many jobs in one
//! script call as the streams have free credits), batched renewal of live streams' leases,
//! the reaper, and wake-ups over Redis pub/sub with a slow poll as safety net.

mod background;
mod hub;
mod queue_loop;
mod session;

pub use hub::{Hub, HubConfig};
pub use session::{Outbound, Session, Settled, MAX_CREDITS};
