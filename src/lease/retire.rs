//! Streams the server ends on its own: those of a connection past `--max-connection-age`
//! (told with `Draining`, given the grace to settle, then their leases handed back) and
//! those silent past `--heartbeat-timeout` while holding leases (a hung worker: ended, its
//! leases left to expire as a failed attempt, as DESIGN.md section 3 says of a dead stream).

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::hub::Hub;
use super::session::{Outbound, Session};
use crate::telemetry::Untrusted;
use crate::Error;

/// Longest sleep between looks at whether a stream waiting for its connection's age has
/// ended meanwhile (the wait then stops and frees the session).
const AGE_POLL: Duration = Duration::from_secs(10);
/// How often a draining stream is looked at for having settled everything.
const GRACE_POLL: Duration = Duration::from_millis(50);

impl Hub {
    /// At `at` (its connection's `--max-connection-age`), sends `session` `Draining(grace)`
    /// and gives it no more leases; once it holds nothing and no batch of its messages is
    /// being handled ([`Session::settled_all`]), or after `grace`, hands back what
    /// it still holds (no attempt used) and ends it with UNAVAILABLE so the worker
    /// reconnects (its connection already had its GOAWAY, so a new call opens a new one).
    /// Returns early when the stream ends by itself.
    pub async fn retire_at(self, session: Arc<Session>, at: Instant, grace: Duration) {
        loop {
            if session.is_closed() {
                return;
            }
            let now = Instant::now();
            if now >= at {
                break;
            }
            tokio::time::sleep((at - now).min(AGE_POLL)).await;
        }
        tracing::info!(worker_id = %Untrusted(&session.worker_id), grace = ?grace,
            "the stream's connection reached --max-connection-age: draining it");
        self.drain_session(&session);
        session.send(Outbound::Draining(grace));
        let end = Instant::now() + grace;
        while Instant::now() < end && !session.settled_all() && !session.is_closed() {
            tokio::time::sleep(GRACE_POLL.min(end - Instant::now())).await;
        }
        let why = Error::StreamClosed(
            "its connection reached --max-connection-age; reconnect".to_owned(),
        );
        self.end_session(&session, why, true).await;
    }

    /// Ends the streams silent for longer than `--heartbeat-timeout` while they hold leases
    /// (idle streams, holding nothing, may wait for work in silence). Their leases are no
    /// longer renewed and expire as failed attempts.
    pub(super) async fn end_silent(&self, now_ms: u64) {
        let timeout = self.config().heartbeat_timeout;
        for s in self.sessions() {
            if s.is_closed() || s.alive(now_ms, timeout) || s.held_count() == 0 {
                continue;
            }
            tracing::info!(worker_id = %Untrusted(&s.worker_id), leases = s.held_count(),
                "the stream was silent past --heartbeat-timeout while holding leases: ending it");
            let why = Error::StreamClosed(format!(
                "no message for longer than --heartbeat-timeout ({}) while holding leases",
                humantime::format_duration(timeout)
            ));
            self.end_session(&s, why, false).await;
        }
    }
}
