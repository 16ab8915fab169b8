//! Worker (Subscribe) streams counted per connection and per authenticated principal, so one
//! client cannot hold an unbounded number of them (each costs a task, a lease book and a
//! place in every lease loop of its queues). A stream past a limit is refused with
//! RESOURCE_EXHAUSTED naming the flag; a [`StreamGuard`] gives its place back when dropped.
//!
//! The connection's first stream also starts its age clock for `--max-connection-age`:
//! [`StreamGuard::age_deadline`] is when its streams are sent `Draining`. The clock starts at
//! the first Subscribe the connection carries (workers open their stream first), never before
//! the connection itself, so a stream is drained at or after its connection's GOAWAY.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::config::AbuseArgs;
use crate::Error;

/// How often the entries of connections with no stream left are looked at for removal.
const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// Identifies the connection a request came on.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ConnKey {
    /// The id jobwire's listener gave it ([`crate::transport::ConnInfo`]).
    Id(u64),
    /// The peer's address (tonic's plain TCP listener): unique among open connections.
    Peer(SocketAddr),
}

impl ConnKey {
    /// The connection of `req`: its [`crate::transport::ConnInfo`] id, else its peer address;
    /// `None` when neither is known (then no per-connection limit applies).
    pub fn of<T>(req: &tonic::Request<T>) -> Option<ConnKey> {
        crate::transport::conn_info(req)
            .map(|c| ConnKey::Id(c.id))
            .or_else(|| req.remote_addr().map(ConnKey::Peer))
    }
}

/// The counters; cheap to clone (shared).
#[derive(Clone, Debug)]
pub struct StreamLimits {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    per_connection: u32,
    per_principal: u32,
    /// Connection age and its grace, when `--max-connection-age` is set.
    age: Option<(Duration, Duration)>,
    counts: Mutex<Counts>,
}

#[derive(Debug)]
struct Counts {
    conns: HashMap<ConnKey, Conn>,
    principals: HashMap<String, u32>,
    last_sweep: Instant,
}

#[derive(Debug)]
struct Conn {
    streams: u32,
    /// When its first stream was admitted (the start of its age clock).
    since: Instant,
}

impl StreamLimits {
    /// Counters with the limits of `args`.
    pub fn new(args: &AbuseArgs) -> StreamLimits {
        StreamLimits {
            inner: Arc::new(Inner {
                per_connection: args.max_streams_per_connection,
                per_principal: args.max_streams_per_principal,
                age: args
                    .connection_age()
                    .map(|a| (a, args.max_connection_age_grace)),
                counts: Mutex::new(Counts {
                    conns: HashMap::new(),
                    principals: HashMap::new(),
                    last_sweep: Instant::now(),
                }),
            }),
        }
    }

    /// The connection age and its grace, when `--max-connection-age` is set.
    pub fn connection_age(&self) -> Option<(Duration, Duration)> {
        self.inner.age
    }

    /// Admits one more stream on `conn` for `principal`, or refuses it (TooManyStreams)
    /// without counting anything.
    pub fn admit(
        &self,
        conn: Option<ConnKey>,
        principal: Option<String>,
    ) -> Result<StreamGuard, Error> {
        let now = Instant::now();
        let mut c = self.inner.lock();
        self.inner.sweep(&mut c, now);
        if let Some(k) = &conn {
            let open = c.conns.get(k).map_or(0, |e| e.streams);
            if open >= self.inner.per_connection {
                return Err(Error::TooManyStreams {
                    limit: self.inner.per_connection,
                    scope: "connection",
                    flag: "max-streams-per-connection",
                });
            }
        }
        if let Some(p) = &principal {
            if c.principals.get(p).copied().unwrap_or(0) >= self.inner.per_principal {
                return Err(Error::TooManyStreams {
                    limit: self.inner.per_principal,
                    scope: "principal",
                    flag: "max-streams-per-principal",
                });
            }
            *c.principals.entry(p.clone()).or_default() += 1;
        }
        let since = conn.as_ref().map(|k| {
            let e = c.conns.entry(k.clone()).or_insert(Conn {
                streams: 0,
                since: now,
            });
            e.streams += 1;
            e.since
        });
        Ok(StreamGuard {
            inner: self.inner.clone(),
            conn,
            principal,
            since,
        })
    }

    /// Streams open on `conn` (for tests and logs).
    pub fn on_connection(&self, conn: &ConnKey) -> u32 {
        self.inner.lock().conns.get(conn).map_or(0, |e| e.streams)
    }
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, Counts> {
        self.counts.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Forgets connections with no stream whose age clock no longer matters: without an age
    /// limit at once (see [`StreamGuard`]'s drop), with one once age + grace have passed
    /// (such a connection has had its GOAWAY and carries no new stream).
    fn sweep(&self, c: &mut Counts, now: Instant) {
        let Some((age, grace)) = self.age else {
            return;
        };
        if now.duration_since(c.last_sweep) < SWEEP_EVERY {
            return;
        }
        c.last_sweep = now;
        c.conns
            .retain(|_, e| e.streams > 0 || now.duration_since(e.since) < age + grace);
    }
}

/// One admitted stream's place; dropping it (the stream ended) frees the place.
#[derive(Debug)]
pub struct StreamGuard {
    inner: Arc<Inner>,
    conn: Option<ConnKey>,
    principal: Option<String>,
    since: Option<Instant>,
}

impl StreamGuard {
    /// When the stream's connection reaches `--max-connection-age` (the stream is then sent
    /// `Draining`), and the grace after it; `None` without an age limit or a known connection.
    pub fn age_deadline(&self) -> Option<(Instant, Duration)> {
        let (age, grace) = self.inner.age?;
        Some((self.since? + age, grace))
    }
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        let mut c = self.inner.lock();
        if let Some(k) = &self.conn {
            if let Some(e) = c.conns.get_mut(k) {
                e.streams = e.streams.saturating_sub(1);
                if e.streams == 0 && self.inner.age.is_none() {
                    c.conns.remove(k);
                }
            }
        }
        if let Some(p) = &self.principal {
            if let Some(n) = c.principals.get_mut(p) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    c.principals.remove(p);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(per_connection: u32, per_principal: u32) -> StreamLimits {
        StreamLimits::new(&AbuseArgs {
            max_streams_per_connection: per_connection,
            max_streams_per_principal: per_principal,
            ..AbuseArgs::default()
        })
    }

    fn flag(e: Error) -> &'static str {
        match e {
            Error::TooManyStreams { flag, .. } => flag,
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn counts_per_connection_and_frees_on_drop() {
        let l = limits(2, 100);
        let c1 = Some(ConnKey::Id(1));
        let a = l.admit(c1.clone(), None).expect("first");
        let _b = l.admit(c1.clone(), None).expect("second");
        let e = l.admit(c1.clone(), None).expect_err("third refused");
        assert_eq!(flag(e), "max-streams-per-connection");
        let _other = l
            .admit(Some(ConnKey::Id(2)), None)
            .expect("another connection");
        drop(a);
        assert_eq!(l.on_connection(&ConnKey::Id(1)), 1);
        let _c = l.admit(c1, None).expect("a place came free");
    }

    #[test]
    fn counts_per_principal_across_connections_and_a_refusal_counts_nothing() {
        let l = limits(100, 2);
        let p = || Some("team-a".to_owned());
        let _a = l.admit(Some(ConnKey::Id(1)), p()).expect("first");
        let b = l.admit(Some(ConnKey::Id(2)), p()).expect("second");
        let e = l
            .admit(Some(ConnKey::Id(3)), p())
            .expect_err("third refused");
        assert_eq!(flag(e), "max-streams-per-principal");
        assert_eq!(
            l.on_connection(&ConnKey::Id(3)),
            0,
            "the refusal counted nothing"
        );
        let _other = l
            .admit(Some(ConnKey::Id(3)), Some("team-b".into()))
            .expect("another principal");
        let _anon = l.admit(Some(ConnKey::Id(3)), None).expect("no principal");
        drop(b);
        let _c = l
            .admit(Some(ConnKey::Id(4)), p())
            .expect("a place came free");
    }

    #[test]
    fn the_age_clock_starts_at_the_connections_first_stream() {
        let l = StreamLimits::new(&AbuseArgs {
            max_connection_age: Duration::from_secs(60),
            max_connection_age_grace: Duration::from_secs(5),
            ..AbuseArgs::default()
        });
        let first = l.admit(Some(ConnKey::Id(1)), None).expect("first");
        let (at, grace) = first.age_deadline().expect("deadline");
        assert_eq!(grace, Duration::from_secs(5));
        drop(first);
        let later = l.admit(Some(ConnKey::Id(1)), None).expect("later");
        assert_eq!(later.age_deadline().expect("deadline").0, at, "same clock");
        assert!(limits(1, 1)
            .admit(Some(ConnKey::Id(1)), None)
            .expect("admit")
            .age_deadline()
            .is_none());
    }
}
