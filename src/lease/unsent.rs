//! Leases this replica got from Redis but has not sent yet: a lease call's jobs from the
//! moment its reply arrives until each lease is taken by its stream's transport or handed
//! back to waiting (`Hub::release`, after Redis answered).
//!
//! A lease call is confirmed to Redis only once none of its leases is unsent
//! (`QueueLoop::take_unconfirmed`). Until then the reaper takes the call for young and
//! unconfirmed (attempts.lua, "Lost lease replies"): it neither fails nor releases an expired
//! lease of it. So a lease that waited in a stalled stream's outbox past its job's timeout
//! (a timeout shorter than the outbox sweep) is handed back uncharged by the sweep instead of
//! being charged `TIMED_OUT` for work no worker received. Confirming earlier let the reaper
//! charge it first (the chaos soak found 34 such attempts in one run).
//!
//! A call is held back at most [`HOLD_AT_MOST`] (a lease leaves the outbox within its
//! session's outbox wait, at most 1 s, plus a sweep): a lease lost track of (a path that
//! forgot to report it) delays its call's confirmation that long, never for good.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Longest a lease call's confirmation waits for its unsent leases.
pub(super) const HOLD_AT_MOST: Duration = Duration::from_secs(2);

/// See the module docs. Keyed by lease call id; per call, when its first lease was counted
/// and the slots of its leases still unsent.
#[derive(Debug, Default)]
pub(crate) struct Unsent {
    calls: Mutex<HashMap<String, (Instant, HashSet<String>)>>,
}

/// The lease call id and slot of lease token `token` (`<call id>-<slot>`), if it has that
/// shape.
fn split(token: &str) -> Option<(&str, &str)> {
    token.rsplit_once('-')
}

impl Unsent {
    fn calls(&self) -> std::sync::MutexGuard<'_, HashMap<String, (Instant, HashSet<String>)>> {
        // Every method changes the map in one step: a poisoned lock is taken over.
        self.calls.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Counts the leases with `tokens` as unsent (their call's reply just arrived).
    pub(crate) fn add<'a>(&self, tokens: impl IntoIterator<Item = &'a str>) {
        let mut calls = self.calls();
        for token in tokens {
            if let Some((call, slot)) = split(token) {
                calls
                    .entry(call.to_owned())
                    .or_insert_with(|| (Instant::now(), HashSet::new()))
                    .1
                    .insert(slot.to_owned());
            }
        }
    }

    /// The lease with `token` was sent, or handed back: it no longer holds its call back.
    /// A token not counted changes nothing.
    pub(crate) fn sent(&self, token: &str) {
        let Some((call, slot)) = split(token) else {
            return;
        };
        let mut calls = self.calls();
        if let Some((_, slots)) = calls.get_mut(call) {
            slots.remove(slot);
            if slots.is_empty() {
                calls.remove(call);
            }
        }
    }

    /// Does the call of lease token `token` wait for an unsent lease ([`Unsent::holds`])?
    pub(crate) fn holds_token(&self, token: &str) -> bool {
        split(token).is_some_and(|(call, _)| self.holds(call))
    }

    /// Must lease call `call` wait to be confirmed (a lease of it unsent, counted less than
    /// [`HOLD_AT_MOST`] ago)? A call held longer is forgotten here.
    pub(crate) fn holds(&self, call: &str) -> bool {
        let mut calls = self.calls();
        match calls.get(call) {
            Some((since, _)) if since.elapsed() < HOLD_AT_MOST => true,
            Some(_) => {
                calls.remove(call);
                false
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Unsent;

    #[test]
    fn a_call_is_held_until_every_lease_of_it_is_sent() {
        let u = Unsent::default();
        u.add(["c1-1", "c1-2", "c2-1"]);
        assert!(u.holds("c1") && u.holds("c2"));
        assert!(u.holds_token("c1-7") && !u.holds_token("c3-1") && !u.holds_token("nodash"));
        u.sent("c1-1");
        assert!(u.holds("c1"), "c1-2 is still unsent");
        u.sent("c1-1");
        u.sent("c9-1");
        u.sent("nodash");
        assert!(u.holds("c1"));
        u.sent("c1-2");
        assert!(!u.holds("c1"));
        assert!(u.holds("c2"));
        assert!(!u.holds("c3"));
    }

    #[test]
    fn a_call_is_held_at_most_the_hold_limit() {
        let u = Unsent::default();
        u.add(["old-1"]);
        u.calls().get_mut("old").expect("counted").0 -= super::HOLD_AT_MOST;
        assert!(!u.holds("old"));
        assert!(u.calls().is_empty(), "a call held too long is forgotten");
    }
}
