//! Full-jitter exponential backoff, as in AWS's "Exponential Backoff and Jitter"
//! (Marc Brooker, 2015): the n-th wait is uniform in `[0, min(cap, base * 2^n)]`, which
//! spreads reconnecting workers apart instead of having them retry in lock-step.

use std::time::Duration;

use rand::Rng;

/// A full-jitter backoff sequence.
#[derive(Clone, Debug)]
pub struct FullJitter {
    base: Duration,
    cap: Duration,
    attempt: u32,
}

impl FullJitter {
    /// Waits start from `base` and grow to `cap`.
    pub fn new(base: Duration, cap: Duration) -> FullJitter {
        FullJitter {
            base,
            cap,
            attempt: 0,
        }
    }

    /// The workers' reconnect backoff: 0.5 s growing to 30 s.
    pub fn reconnect() -> FullJitter {
        FullJitter::new(Duration::from_millis(500), Duration::from_secs(30))
    }

    /// The next wait: uniform in `[0, min(cap, base * 2^attempt)]`.
    pub fn next_delay(&mut self) -> Duration {
        let ceiling = self
            .base
            .saturating_mul(1u32 << self.attempt.min(20))
            .min(self.cap);
        self.attempt = self.attempt.saturating_add(1);
        ceiling.mul_f64(rand::rng().random::<f64>())
    }

    /// Starts over (after a success).
    pub fn reset(&mut self) {
        self.attempt = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_stay_under_the_growing_ceiling_and_the_cap() {
        let mut b = FullJitter::new(Duration::from_millis(500), Duration::from_secs(30));
        for n in 0..12u32 {
            let ceiling = Duration::from_millis(500 * (1u64 << n)).min(Duration::from_secs(30));
            assert!(b.next_delay() <= ceiling, "attempt {n}");
        }
        b.reset();
        assert!(b.next_delay() <= Duration::from_millis(500));
    }
}
