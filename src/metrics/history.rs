//! A short in-process history of two counters per queue, for the dashboard's sparklines: jobs
//! completed and failed attempts (rate-limited returns excluded) per [`BUCKET`] over the last
//! [`BUCKETS`] buckets (10 minutes), on this replica only.
//!
//! Bounded: a fixed ring of buckets per queue and at most [`MAX_QUEUES`] queues; when that is
//! reached, queues silent for the whole window make room, else the new queue is not tracked
//! (its sparkline stays flat). Fed by [`super::completed`] and [`super::failed`]; one short
//! `std::sync::Mutex` section per event, never held across an `.await`.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Width of one bucket.
pub const BUCKET: Duration = Duration::from_secs(10);
/// Buckets kept per queue: 60 x 10 s = the last 10 minutes.
pub const BUCKETS: usize = 60;
/// Most queues tracked at once.
pub const MAX_QUEUES: usize = 1000;

/// One queue's ring: `counts[b % BUCKETS]` holds bucket `b` for `b` in
/// `last - BUCKETS + 1 ..= last`.
#[derive(Clone, Debug)]
struct Ring {
    last: u64,
    counts: [(u32, u32); BUCKETS],
}

impl Ring {
    fn new(now: u64) -> Ring {
        Ring {
            last: now,
            counts: [(0, 0); BUCKETS],
        }
    }

    /// Moves the ring forward to bucket `now`, zeroing the buckets skipped.
    fn advance(&mut self, now: u64) {
        if now <= self.last {
            return;
        }
        let gap = (now - self.last).min(BUCKETS as u64);
        for b in (now + 1 - gap)..=now {
            self.counts[(b % BUCKETS as u64) as usize] = (0, 0);
        }
        self.last = now;
    }

    fn series(&self, now: u64) -> Vec<(u32, u32)> {
        (0..BUCKETS as u64)
            .map(|i| {
                let b = (now + 1).saturating_sub(BUCKETS as u64) + i;
                if b + BUCKETS as u64 > self.last && b <= self.last {
                    self.counts[(b % BUCKETS as u64) as usize]
                } else {
                    (0, 0)
                }
            })
            .collect()
    }
}

fn rings() -> &'static Mutex<HashMap<String, Ring>> {
    static RINGS: OnceLock<Mutex<HashMap<String, Ring>>> = OnceLock::new();
    RINGS.get_or_init(|| Mutex::new(HashMap::new()))
}

fn bucket_now() -> u64 {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    secs / BUCKET.as_secs()
}

/// Adds `completed` completed jobs and `failed` failed attempts of `queue` to the current
/// bucket.
pub(crate) fn record(queue: &str, completed: u32, failed: u32) {
    let now = bucket_now();
    let mut map = match rings().lock() {
        Ok(m) => m,
        Err(poisoned) => poisoned.into_inner(),
    };
    if !map.contains_key(queue) {
        if map.len() >= MAX_QUEUES {
            map.retain(|_, r| r.last + BUCKETS as u64 > now);
        }
        if map.len() >= MAX_QUEUES {
            return;
        }
        map.insert(queue.to_owned(), Ring::new(now));
    }
    if let Some(ring) = map.get_mut(queue) {
        ring.advance(now);
        let slot = &mut ring.counts[(now % BUCKETS as u64) as usize];
        slot.0 = slot.0.saturating_add(completed);
        slot.1 = slot.1.saturating_add(failed);
    }
}

/// The last [`BUCKETS`] buckets of `queue`, oldest first, as (completed, failed) per bucket;
/// all zeros for a queue not tracked on this replica.
pub fn series(queue: &str) -> Vec<(u32, u32)> {
    let now = bucket_now();
    let map = match rings().lock() {
        Ok(m) => m,
        Err(poisoned) => poisoned.into_inner(),
    };
    match map.get(queue) {
        Some(r) => r.series(now),
        None => vec![(0, 0); BUCKETS],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_keeps_the_last_window_and_zeroes_skipped_buckets() {
        let mut r = Ring::new(100);
        r.counts[(100 % BUCKETS as u64) as usize] = (5, 1);
        r.advance(101);
        r.counts[(101 % BUCKETS as u64) as usize].0 += 2;
        let s = r.series(101);
        assert_eq!(s.len(), BUCKETS);
        assert_eq!(s[BUCKETS - 1], (2, 0));
        assert_eq!(s[BUCKETS - 2], (5, 1));
        // Read later without new events: the buckets slide left, the new ones are empty.
        let s = r.series(103);
        assert_eq!(s[BUCKETS - 3], (2, 0));
        assert_eq!(s[BUCKETS - 1], (0, 0));
        // A jump past the whole window clears everything.
        r.advance(101 + BUCKETS as u64);
        assert!(r.series(101 + BUCKETS as u64).iter().all(|&c| c == (0, 0)));
    }

    #[test]
    fn record_and_series_round_trip() {
        record("history-test-q", 3, 1);
        let s = series("history-test-q");
        assert_eq!(s.len(), BUCKETS);
        let (c, f) = s.iter().fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
        assert!(c >= 3 && f >= 1, "{s:?}");
        assert!(series("history-never-seen").iter().all(|&c| c == (0, 0)));
    }
}
