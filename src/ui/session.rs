//! Dashboard sessions, in memory on this replica: an opaque random id in the
//! `jobwire_session` cookie maps to the principal's bearer token (kept server-side, never
//! sent back), a CSRF token, and the login and last-use times.
//!
//! A session ends on logout, after the idle timeout, after the absolute timeout, and when
//! its token stops authenticating (revoked by an auth-file reload: the routes re-check it on
//! every request). The map is keyed by the SHA-256 of the id (a lookup's timing says
//! nothing about live ids) and bounded: at [`MAX_SESSIONS`], expired sessions go first, then
//! the least recently used.
//!
//! Sessions are per replica: behind several replicas the dashboard needs session affinity
//! (the Helm chart sets `sessionAffinity: ClientIP` when the UI is on).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use rand::RngCore;
use sha2::{Digest, Sha256};

/// Most sessions kept at once.
pub const MAX_SESSIONS: usize = 10_000;

/// 32 random bytes from the thread's CSPRNG (ChaCha, seeded from the OS), URL-safe base64.
pub fn random_id() -> String {
    let mut b = [0u8; 32];
    rand::rng().fill_bytes(&mut b);
    URL_SAFE_NO_PAD.encode(b)
}

fn key(id: &str) -> [u8; 32] {
    Sha256::digest(id.as_bytes()).into()
}

/// One login.
#[derive(Clone)]
pub struct Session {
    /// The bearer token the session calls the API with; `None` without an auth file.
    pub token: Option<Arc<str>>,
    /// The session's CSRF token.
    pub csrf: String,
    created: Instant,
    last_seen: Instant,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("created", &self.created)
            .finish_non_exhaustive()
    }
}

/// The sessions of this replica; cheap to clone.
#[derive(Clone, Debug)]
pub struct Sessions {
    inner: Arc<Mutex<HashMap<[u8; 32], Session>>>,
    idle: Duration,
    max: Duration,
}

impl Sessions {
    /// Sessions ending after `idle` without use or `max` after their login.
    pub fn new(idle: Duration, max: Duration) -> Sessions {
        Sessions {
            inner: Arc::new(Mutex::new(HashMap::new())),
            idle,
            max,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<[u8; 32], Session>> {
        match self.inner.lock() {
            Ok(m) => m,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    fn expired(&self, s: &Session, now: Instant) -> bool {
        now.duration_since(s.last_seen) >= self.idle || now.duration_since(s.created) >= self.max
    }

    /// Starts a session for `token`; returns its id (for the cookie) and the session.
    pub fn create(&self, token: Option<String>) -> (String, Session) {
        let id = random_id();
        let now = Instant::now();
        let s = Session {
            token: token.map(Arc::from),
            csrf: super::csrf::new_token(),
            created: now,
            last_seen: now,
        };
        let mut map = self.lock();
        if map.len() >= MAX_SESSIONS {
            map.retain(|_, s| !self.expired(s, now));
        }
        if map.len() >= MAX_SESSIONS {
            if let Some(k) = map.iter().min_by_key(|(_, s)| s.last_seen).map(|(k, _)| *k) {
                map.remove(&k);
            }
        }
        map.insert(key(&id), s.clone());
        (id, s)
    }

    /// The live session of `id`, marked as used now when `used` (a page the person asked
    /// for, not the overview's automatic refresh, which must not keep an abandoned tab's
    /// session alive); an expired one is removed.
    pub fn touch(&self, id: &str, used: bool) -> Option<Session> {
        let now = Instant::now();
        let k = key(id);
        let mut map = self.lock();
        let s = map.get_mut(&k)?;
        if self.expired(s, now) {
            map.remove(&k);
            return None;
        }
        if used {
            s.last_seen = now;
        }
        Some(s.clone())
    }

    /// Ends the session `id` (logout, or its token no longer authenticates).
    pub fn end(&self, id: &str) {
        self.lock().remove(&key(id));
    }

    /// Live sessions (expired ones not yet removed count too).
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_live_end_and_expire() {
        let s = Sessions::new(Duration::from_secs(60), Duration::from_secs(3600));
        let (id, sess) = s.create(Some("jw_a_b".into()));
        assert_eq!(id.len(), 43);
        assert!(!format!("{sess:?}").contains("jw_a_b"));
        let again = s.touch(&id, true).expect("live");
        assert_eq!(again.csrf, sess.csrf);
        assert!(s.touch("not-a-session", true).is_none());
        s.end(&id);
        assert!(s.touch(&id, true).is_none());

        let idle = Sessions::new(Duration::ZERO, Duration::from_secs(3600));
        let (id, _) = idle.create(None);
        assert!(idle.touch(&id, false).is_none(), "idle timeout");
        assert_eq!(idle.len(), 0);
        let max = Sessions::new(Duration::from_secs(60), Duration::ZERO);
        let (id, _) = max.create(None);
        assert!(max.touch(&id, true).is_none(), "absolute timeout");
    }

    #[test]
    fn ids_are_random() {
        assert_ne!(random_id(), random_id());
    }
}
