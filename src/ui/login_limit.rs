//! The login rate limit of the dashboard: a token bucket per client address (`governor`),
//! `--ui-login-rate` attempts a minute with as many at once, good or bad token alike, checked
//! before the token is read. An IPv6 client is limited by its /64 (one host usually holds a
//! whole /64). Behind a proxy every client shares the proxy's address: raise the rate there.
//!
//! The buckets are forgotten once full again (after a minute without attempts), so the map
//! holds at most the addresses seen in the last minute.

use std::net::IpAddr;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};

/// Addresses kept before the full buckets are swept out.
const SWEEP_AT: usize = 4096;

/// The per-address login limiter; cheap to clone.
#[derive(Clone)]
pub struct LoginLimit {
    limiter: Arc<DefaultKeyedRateLimiter<IpAddr>>,
    clock: DefaultClock,
}

impl std::fmt::Debug for LoginLimit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoginLimit")
            .field("addresses", &self.limiter.len())
            .finish()
    }
}

/// The bucket of `ip`: the address, or an IPv6 address's /64.
fn bucket(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6((u128::from(v6) & !((1u128 << 64) - 1)).into()),
        },
    }
}

impl LoginLimit {
    /// `per_minute` attempts a minute per address, as many at once (at least 1).
    pub fn new(per_minute: u32) -> LoginLimit {
        let n = NonZeroU32::new(per_minute.max(1)).unwrap_or(NonZeroU32::MIN);
        LoginLimit {
            limiter: Arc::new(RateLimiter::keyed(Quota::per_minute(n))),
            clock: DefaultClock::default(),
        }
    }

    /// Takes one attempt of `ip`'s bucket: `Err(wait)` when it is empty, with how long
    /// until the next attempt is allowed.
    pub fn check(&self, ip: IpAddr) -> Result<(), Duration> {
        if self.limiter.len() >= SWEEP_AT {
            self.limiter.retain_recent();
        }
        self.limiter
            .check_key(&bucket(ip))
            .map_err(|not_until| not_until.wait_time_from(self.clock.now()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_then_refusals_per_address_and_ipv6_by_its_64() {
        let l = LoginLimit::new(3);
        let a: IpAddr = "192.0.2.1".parse().expect("ip");
        for _ in 0..3 {
            l.check(a).expect("within the burst");
        }
        let wait = l.check(a).expect_err("past the burst");
        assert!(
            wait > Duration::ZERO && wait <= Duration::from_secs(20),
            "{wait:?}"
        );
        l.check("192.0.2.2".parse().expect("ip"))
            .expect("another address");
        let v6 = |s: &str| s.parse::<IpAddr>().expect("ip");
        for _ in 0..3 {
            l.check(v6("2001:db8::1")).expect("within the burst");
        }
        l.check(v6("2001:db8::ffff")).expect_err("the same /64");
        l.check(v6("2001:db8:0:1::1")).expect("another /64");
        assert_eq!(bucket(v6("::ffff:192.0.2.1")), a);
    }
}
