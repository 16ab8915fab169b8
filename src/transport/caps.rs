//! Caps on the connections a port holds: in total (the accept loop waits for room before it
//! accepts, so at the cap new connections wait in the kernel's backlog instead of taking
//! descriptors) and per peer IP address (a connection past it is closed at once and counted).
//!
//! A connection holds its [`Slot`] until it is dropped; both counts go down then.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Connections closed at accept or before their first request, by port and reason
/// (`per_ip_limit`; on the gRPC port also `preface_timeout`).
pub const CONNECTIONS_REFUSED: &str = "jobwire_connections_refused_total";
/// Connections open now, by port.
pub const CONNECTIONS_OPEN: &str = "jobwire_connections_open";

/// The port a connection came to: the `port` label of the connection metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Port {
    /// The gRPC port (`--grpc-addr`).
    Grpc,
    /// The main HTTP port (`--http-addr`).
    Http,
    /// The metrics listener (`--metrics-addr`).
    Metrics,
}

impl Port {
    /// The label value.
    pub fn label(self) -> &'static str {
        match self {
            Port::Grpc => "grpc",
            Port::Http => "http",
            Port::Metrics => "metrics",
        }
    }

    /// Counts a connection of this port closed for `reason`.
    pub fn refused(self, reason: &'static str) {
        metrics::counter!(CONNECTIONS_REFUSED, "port" => self.label(), "reason" => reason)
            .increment(1);
    }
}

/// The caps of one listener; cheap to clone.
#[derive(Clone, Debug)]
pub struct ConnCaps {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    port: Port,
    total: Arc<Semaphore>,
    per_ip: u32,
    by_ip: Mutex<HashMap<IpAddr, u32>>,
}

/// One admitted connection's place under the caps; dropping it frees the place.
#[derive(Debug)]
pub struct Slot {
    _permit: OwnedSemaphorePermit,
    inner: Arc<Inner>,
    ip: IpAddr,
}

impl ConnCaps {
    /// Caps of `port`: `total` connections at once (at least 1), `per_ip` from one address.
    /// Starts the port's metrics at 0.
    pub fn new(port: Port, total: u64, per_ip: u32) -> Self {
        let total = usize::try_from(total)
            .unwrap_or(usize::MAX)
            .clamp(1, Semaphore::MAX_PERMITS);
        metrics::counter!(CONNECTIONS_REFUSED, "port" => port.label(), "reason" => "per_ip_limit")
            .increment(0);
        if port == Port::Grpc {
            metrics::counter!(CONNECTIONS_REFUSED, "port" => port.label(), "reason" => "preface_timeout")
                .increment(0);
        }
        metrics::gauge!(CONNECTIONS_OPEN, "port" => port.label()).set(0.0);
        Self {
            inner: Arc::new(Inner {
                port,
                total: Arc::new(Semaphore::new(total)),
                per_ip,
                by_ip: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// Waits until the port is under its total cap; the accept loop calls this before each
    /// accept, so it pauses (without spinning) while the cap is reached.
    pub async fn room(&self) -> OwnedSemaphorePermit {
        match self.inner.total.clone().acquire_owned().await {
            Ok(p) => p,
            // The semaphore is never closed.
            Err(_) => unreachable!("connection semaphore closed"),
        }
    }

    /// Admits a connection from `ip` into the room `permit` holds, or `None` (counted) when
    /// `ip` already has its `per_ip` connections: the caller closes it.
    pub fn admit(&self, permit: OwnedSemaphorePermit, ip: IpAddr) -> Option<Slot> {
        let inner = &self.inner;
        {
            let mut by_ip = inner.by_ip.lock().unwrap_or_else(PoisonError::into_inner);
            let n = by_ip.entry(ip).or_insert(0);
            if *n >= inner.per_ip {
                drop(by_ip);
                inner.port.refused("per_ip_limit");
                tracing::debug!(port = inner.port.label(), peer = %ip, "too many connections from this address; closed");
                return None;
            }
            *n += 1;
        }
        metrics::gauge!(CONNECTIONS_OPEN, "port" => inner.port.label()).increment(1.0);
        Some(Slot {
            _permit: permit,
            inner: inner.clone(),
            ip,
        })
    }

    /// The connections open now (for tests and logs).
    pub fn open(&self) -> usize {
        let by_ip = self
            .inner
            .by_ip
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        by_ip.values().map(|n| *n as usize).sum()
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut by_ip = self
            .inner
            .by_ip
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(n) = by_ip.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                by_ip.remove(&self.ip);
            }
        }
        drop(by_ip);
        metrics::gauge!(CONNECTIONS_OPEN, "port" => self.inner.port.label()).decrement(1.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn the_per_ip_cap_refuses_and_a_dropped_slot_frees_its_place() {
        let caps = ConnCaps::new(Port::Http, 10, 2);
        let a: IpAddr = [10, 0, 0, 1].into();
        let b: IpAddr = [10, 0, 0, 2].into();
        let s1 = caps.admit(caps.room().await, a).expect("first");
        let _s2 = caps.admit(caps.room().await, a).expect("second");
        assert!(caps.admit(caps.room().await, a).is_none(), "third from a");
        let _s3 = caps.admit(caps.room().await, b).expect("b has its own");
        assert_eq!(caps.open(), 3);
        drop(s1);
        assert!(caps.admit(caps.room().await, a).is_some(), "room again");
    }

    #[tokio::test]
    async fn at_the_total_cap_room_waits_until_a_slot_is_dropped() {
        let caps = ConnCaps::new(Port::Http, 2, 10);
        let ip: IpAddr = [10, 0, 0, 1].into();
        let s1 = caps.admit(caps.room().await, ip).expect("first");
        let _s2 = caps.admit(caps.room().await, ip).expect("second");
        let waiting = tokio::time::timeout(Duration::from_millis(100), caps.room()).await;
        assert!(waiting.is_err(), "no room at the cap");
        drop(s1);
        let _room = tokio::time::timeout(Duration::from_secs(5), caps.room())
            .await
            .expect("room after a close");
    }
}
