//! New jobs refused while Redis may evict (issue 32, item 9). With a `maxmemory-policy` other
//! than `noeviction`, Redis deletes keys of its choosing under memory pressure, jobs and
//! leases included, without a word. Start-up refuses such a policy (unless
//! `--allow-eviction`); the server's health watch (`server.rs`, every 500 ms) also notices a
//! policy changed at run time, goes NOT_SERVING and tells the store here, and from then on
//! [`Store::enqueue_each`](super::Store::enqueue_each) (Enqueue, EnqueueBatch, every path that
//! creates jobs) answers [`StoreError::Evicting`] without writing, until the policy is
//! `noeviction` again. Calls on jobs already stored (leases, acks, fails, renewals, cancels,
//! deletes, replays) go on: refusing them would strand work that is running, and they do not
//! add jobs for Redis to lose.

use std::sync::RwLock;

use super::{Store, StoreError};

/// The evicting policy the health watch last saw; None while it is `noeviction` (or with
/// `--allow-eviction`, where it is never set).
#[derive(Debug, Default)]
pub(crate) struct Eviction {
    policy: RwLock<Option<String>>,
}

impl Store {
    /// Records what the health watch read: `Some(policy)` while Redis's `maxmemory-policy`
    /// evicts (new jobs are refused), `None` once it is `noeviction` again.
    pub fn set_evicting(&self, policy: Option<String>) {
        *self
            .eviction
            .policy
            .write()
            .unwrap_or_else(|p| p.into_inner()) = policy;
    }

    /// [`StoreError::Evicting`] while an evicting policy is recorded ([`Store::set_evicting`]).
    pub(super) fn refuse_if_evicting(&self) -> Result<(), StoreError> {
        let policy = self
            .eviction
            .policy
            .read()
            .unwrap_or_else(|p| p.into_inner());
        match policy.as_ref() {
            Some(p) => Err(StoreError::Evicting { policy: p.clone() }),
            None => Ok(()),
        }
    }
}
