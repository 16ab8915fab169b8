//! Dashboard sessions, in memory on this replica: an opaque random id in the
//! `jobwire_session` cookie maps to the principal's bearer token (kept server-side, never
//! sent back), a CSRF token, and the login and last-use times.
//!
//! A session ends on logout, after the idle timeout, after the absolute timeout, and when
//! its token stops authenticating (revoked by an auth-file reload: the routes re-check it on
//! every request). The map is keyed by the SHA-256 of the id (a lookup's timing says
//! nothing about live ids) and bounded twice: a principal has at most
//! `--ui-max-sessions-per-principal` sessions (its next login ends its own least recently
//! used one, never another principal's), and the map at most [`MAX_SESSIONS`] (expired
//! sessions go first, then the creating principal's least recently used, then anyone's).
//!
//! Sessions are per replica: behind several replicas the dashboard needs session affinity
//! (the Helm chart sets `sessionAffinity: ClientIP` when the UI is on).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use rand::RngCore;
use sha2::{Digest, Sha256};

/// Most sessions kept at once.
pub const MAX_SESSIONS: usize = 10_000;

/// The next session's [`Session::seq`].
static NEXT_SEQ: AtomicU64 = AtomicU64::new(0);

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
    /// The principal it logged in as; `None` without an auth file (anonymous sessions are
    /// not capped per principal).
    principal: Option<Arc<str>>,
    /// Creation order: breaks ties of `last_seen` (an Instant may repeat).
    seq: u64,
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
    per_principal: usize,
}

impl Sessions {
    /// Sessions ending after `idle` without use or `max` after their login, at most
    /// `per_principal` (at least 1) of one principal at once.
    pub fn new(idle: Duration, max: Duration, per_principal: usize) -> Sessions {
        Sessions {
            inner: Arc::new(Mutex::new(HashMap::new())),
            idle,
            max,
            per_principal: per_principal.max(1),
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

    /// Starts a session for `token`, logged in as `principal` (`None`: anonymous, no auth
    /// file); returns its id (for the cookie) and the session. Ends `principal`'s least
    /// recently used sessions past the per-principal cap.
    pub fn create(&self, token: Option<String>, principal: Option<&str>) -> (String, Session) {
        let id = random_id();
        let now = Instant::now();
        let s = Session {
            token: token.map(Arc::from),
            csrf: super::csrf::new_token(),
            principal: principal.map(Arc::from),
            seq: NEXT_SEQ.fetch_add(1, Ordering::Relaxed),
            created: now,
            last_seen: now,
        };
        let mut map = self.lock();
        let lru = |map: &HashMap<[u8; 32], Session>, of: Option<&str>| {
            map.iter()
                .filter(|(_, s)| of.is_none() || s.principal.as_deref() == of)
                .min_by_key(|(_, s)| (s.last_seen, s.seq))
                .map(|(k, _)| *k)
        };
        if let Some(p) = principal {
            map.retain(|_, s| s.principal.as_deref() != Some(p) || !self.expired(s, now));
            let mut own = map
                .values()
                .filter(|s| s.principal.as_deref() == Some(p))
                .count();
            while own >= self.per_principal {
                match lru(&map, Some(p)) {
                    Some(k) => map.remove(&k),
                    None => break,
                };
                own -= 1;
            }
        }
        if map.len() >= MAX_SESSIONS {
            map.retain(|_, s| !self.expired(s, now));
        }
        if map.len() >= MAX_SESSIONS {
            if let Some(k) = principal
                .and_then(|p| lru(&map, Some(p)))
                .or_else(|| lru(&map, None))
            {
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
        let s = Sessions::new(Duration::from_secs(60), Duration::from_secs(3600), 20);
        let (id, sess) = s.create(Some("jw_a_b".into()), Some("a"));
        assert_eq!(id.len(), 43);
        assert!(!format!("{sess:?}").contains("jw_a_b"));
        let again = s.touch(&id, true).expect("live");
        assert_eq!(again.csrf, sess.csrf);
        assert!(s.touch("not-a-session", true).is_none());
        s.end(&id);
        assert!(s.touch(&id, true).is_none());

        let idle = Sessions::new(Duration::ZERO, Duration::from_secs(3600), 20);
        let (id, _) = idle.create(None, None);
        assert!(idle.touch(&id, false).is_none(), "idle timeout");
        assert_eq!(idle.len(), 0);
        let max = Sessions::new(Duration::from_secs(60), Duration::ZERO, 20);
        let (id, _) = max.create(None, None);
        assert!(max.touch(&id, true).is_none(), "absolute timeout");
    }

    #[test]
    fn a_principal_past_its_cap_ends_its_own_least_recently_used_session_only() {
        let s = Sessions::new(Duration::from_secs(60), Duration::from_secs(3600), 3);
        let (admin, _) = s.create(Some("jw_admin_x".into()), Some("admin"));
        let ids: Vec<String> = (0..50)
            .map(|_| s.create(Some("jw_v_x".into()), Some("viewer")).0)
            .collect();
        assert!(
            s.touch(&admin, false).is_some(),
            "another principal's session lives"
        );
        assert_eq!(s.len(), 4);
        for (i, id) in ids.iter().enumerate() {
            assert_eq!(s.touch(id, false).is_some(), i >= 47, "session {i}");
        }
        // Anonymous sessions (no auth file) are not capped per principal.
        let anon = Sessions::new(Duration::from_secs(60), Duration::from_secs(3600), 1);
        let a = anon.create(None, None).0;
        anon.create(None, None);
        assert!(anon.touch(&a, false).is_some());
    }

    #[test]
    fn ids_are_random() {
        assert_ne!(random_id(), random_id());
    }
}
