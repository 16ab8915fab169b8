//! The combined ack and lease call (`ack_lease.lua`): a stream's acks and the lease of its
//! next jobs in one script call, one round trip.

use super::codec::array;
use super::keys::Keys;
use super::leases::{ack_args, ack_outcomes, acked_at, lease_batch};
use super::scripts;
use super::types::{AckInput, AckOutcome, LeaseBatch, Settle};
use super::{Store, StoreError};
use crate::jobs::QueueName;

impl Store {
    /// Acks `items` as [`Store::ack`] does, then, in the same script call, leases up to
    /// `worker_ids.len()` jobs as [`Store::lease`] does (the i-th job for `worker_ids[i]`,
    /// under lease call `call`, after confirming the calls in `confirm`). The outcomes are
    /// those of the first items (all unless the call's byte budget ran out); when they are
    /// short, nothing was leased (`None`) and the caller acks the rest on its own. On `Err`
    /// the call may have run: release `call` as for a failed lease call.
    pub async fn ack_lease<I: AckInput>(
        &self,
        queue: &QueueName,
        items: &[I],
        worker_ids: &[&str],
        lease_ms: u64,
        call: &str,
        confirm: &[String],
    ) -> Result<(Vec<Settle<AckOutcome>>, Option<LeaseBatch>), StoreError> {
        let keys = Keys::shared(queue);
        let tokens: Vec<String> = (1..=worker_ids.len())
            .map(|i| format!("{call}-{i}"))
            .collect();
        let mut args = Vec::with_capacity(6 + confirm.len() + worker_ids.len() + items.len() * 2);
        args.push(lease_ms.to_string().into_bytes());
        args.push(call.as_bytes().to_vec());
        args.push(confirm.len().to_string().into_bytes());
        args.extend(confirm.iter().map(|c| c.as_bytes().to_vec()));
        args.push(worker_ids.len().to_string().into_bytes());
        args.extend(worker_ids.iter().map(|w| w.as_bytes().to_vec()));
        args.extend(ack_args(items));
        // As for a lease: the intent and the script leave together, in this order.
        let (intended, reply) = tokio::join!(
            self.intend_due(queue),
            self.run_script(&scripts::ACK_LEASE, &keys, args)
        );
        let mut parts = array(reply?)?.into_iter();
        let (Some(acked), Some(leased)) = (parts.next(), parts.next()) else {
            return Err(super::codec::bad("ack_lease.lua reply"));
        };
        let outcomes = ack_outcomes(items.len(), acked)?;
        let batch = if outcomes.len() == items.len() {
            Some(lease_batch(queue, tokens, leased)?)
        } else {
            None
        };
        // One due-index update for both, held for the next intent or reaper tick
        // (`due_later.rs`): the earliest of the retention (from the acks) and the first
        // lease deadline.
        let first_deadline = batch
            .as_ref()
            .and_then(|b| b.jobs.iter().map(|j| j.deadline_ms).min());
        let due = match (acked_at(&outcomes), first_deadline) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        if let Some(due) = due {
            self.due_after_write(queue, due, intended);
        }
        Ok((outcomes, batch))
    }
}
