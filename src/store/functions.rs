//! The function library on Redis (`scripts.rs`, [`LIBRARY`]): loading it on every master,
//! and falling back to scripts while it is missing.
//!
//! No call waits for a load. A call whose function Redis does not have (`ERR Function not
//! found`: the first calls of a new server version, a Redis restarted without persistence,
//! `FUNCTION FLUSH`, a failover to a replica that never got the library) runs the same code
//! as a script at once (`client.rs`), and starts a load behind it: `FUNCTION LOAD` on every
//! master, at most one at a time and one a second. Replicas get the library from their
//! master, and it is kept in RDB and AOF files, so it survives restarts and failovers that
//! keep the data.
//!
//! A library Redis refuses for good (no permission to `FUNCTION LOAD` under an ACL, a Redis
//! without functions) turns the library off for this store: every call then runs as a
//! script, 10-30 µs of Redis CPU a call dearer, and the log says why once.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::LazyLock;
use std::time::Instant;

use redis::Value;

use super::client::Store;
use super::error::{classify, Class};
use super::scripts::LIBRARY;
use super::StoreError;

/// The least time between two loads started by missing functions, ms.
const LOAD_EVERY_MS: u64 = 1000;

/// The library's state on one store (shared by its clones).
#[derive(Default)]
pub(crate) struct Functions {
    /// Set once Redis refused the library for good: every call runs as a script.
    off: AtomicBool,
    /// A load is under way.
    loading: AtomicBool,
    /// When the last load started (ms since [`EPOCH`]; 0: none yet).
    last_load_ms: AtomicU64,
}

impl Functions {
    /// Whether calls go as FCALL.
    pub(super) fn in_use(&self) -> bool {
        !self.off.load(Ordering::Relaxed)
    }
}

/// The monotonic clock's zero for [`Functions::last_load_ms`] (a wall clock set back would
/// hold loads off).
static EPOCH: LazyLock<Instant> = LazyLock::new(Instant::now);

/// Ms since [`EPOCH`], from 1 (0 means no load yet).
fn now_ms() -> u64 {
    EPOCH.elapsed().as_millis() as u64 + 1
}

impl Store {
    /// Loads the library on every master (`FUNCTION LOAD REPLACE`: a master that has it
    /// already gets the same code again). Errors: Redis unreachable or one master refusing
    /// it; a refusal for good (not a transient error, not OOM) also turns the library off
    /// for this store.
    async fn load_functions(&self) -> Result<(), StoreError> {
        let mut cmd = redis::cmd("FUNCTION");
        cmd.arg("LOAD").arg("REPLACE").arg(LIBRARY.code.as_str());
        let replies = match self.conn.on_every_master(cmd).await {
            Ok(replies) => replies,
            Err(e) => return Err(self.refused(e)),
        };
        for (_, reply) in replies {
            if let Value::ServerError(e) = reply {
                return Err(self.refused(e.into()));
            }
        }
        Ok(())
    }

    /// Whether an FCALL that got `reply` ran nothing because of the library, so the call
    /// must go as a script: its function is missing (`ERR Function not found`: a load starts
    /// behind it), or an ACL refuses FCALL (`NOPERM`: the library turns off). Either counts
    /// as a reload ([`Store::script_reloads`]).
    pub(super) fn function_missing(&self, reply: &redis::RedisResult<Value>) -> bool {
        let Err(e) = reply else { return false };
        // Only refusals of the FCALL itself: an error a function raised once running (which
        // may have written) must reach the caller, never run the call a second time.
        // (Matched on the text: behind WAIT, in a pipeline, the error's code is the pipeline's.)
        let text = e.to_string();
        if text.contains("Function not found") {
            self.load_functions_behind();
        } else if (e.code() == Some("NOPERM") || text.contains("NOPERM"))
            && (text.contains("'fcall'") || e.detail().is_some_and(|d| d.contains("'fcall'")))
        {
            self.functions_refused(e);
        } else {
            return false;
        }
        self.count_reload();
        true
    }

    /// Starts [`Store::load_functions`] in the background unless one is under way or one
    /// started less than [`LOAD_EVERY_MS`] ago.
    pub(super) fn load_functions_behind(&self) {
        let now = now_ms();
        let last = self.functions.last_load_ms.load(Ordering::Relaxed);
        if (last > 0 && now < last + LOAD_EVERY_MS)
            || self.functions.loading.swap(true, Ordering::AcqRel)
        {
            return;
        }
        self.functions.last_load_ms.store(now, Ordering::Relaxed);
        let store = self.clone();
        tokio::spawn(async move {
            match store.load_functions().await {
                Ok(()) => tracing::info!(library = %LIBRARY.name, "function library loaded"),
                Err(e) => tracing::debug!(error = %e, "function library not loaded yet"),
            }
            store.functions.loading.store(false, Ordering::Release);
        });
    }

    /// `e` as a store error; turns the library off when it is a refusal for good.
    fn refused(&self, e: redis::RedisError) -> StoreError {
        if classify(&e) == Class::Other {
            self.functions_refused(&e);
        }
        StoreError::from(e)
    }

    /// Turns the library off for this store (Redis refused it: `e`), saying so once.
    pub(super) fn functions_refused(&self, e: &redis::RedisError) {
        if !self.functions.off.swap(true, Ordering::AcqRel) {
            tracing::warn!(
                error = %e,
                "Redis refused jobwire's function library; every call runs as a script (EVALSHA), 10-30 µs of Redis CPU dearer"
            );
        }
    }
}
