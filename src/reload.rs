//! Reloading the files the server reads at start (TLS certificates, the auth file) without a
//! restart: each watched set of files is re-read when its content changes (polled, so that the
//! atomic symlink swap Kubernetes uses for mounted Secrets is seen like an in-place edit) and
//! on SIGHUP. A reload that fails keeps what is in force and logs the error; the same bad
//! content is not retried until it changes again (or the next SIGHUP).
//!
//! Every attempt is counted in `jobwire_config_reloads_total{file, result}` (`result` is `ok`
//! or `error`).

use std::path::PathBuf;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// Name of the reload counter.
pub const RELOADS: &str = "jobwire_config_reloads_total";

/// Default period of the content poll.
pub const DEFAULT_POLL: Duration = Duration::from_secs(2);

/// A fingerprint of the files' content: `None` for a file that cannot be read.
fn fingerprint(paths: &[PathBuf]) -> Vec<Option<u64>> {
    use std::hash::{Hash, Hasher};
    paths
        .iter()
        .map(|p| {
            std::fs::read(p).ok().map(|bytes| {
                let mut h = std::collections::hash_map::DefaultHasher::new();
                bytes.hash(&mut h);
                h.finish()
            })
        })
        .collect()
}

/// Watches `paths` (polled every `poll`, and on SIGHUP) until `stop`, calling `reload` when
/// their content changes. `what` names the files in logs and in the `file` label (e.g.
/// `"tls"`, `"auth"`). `reload` returns a message that names the problem (file, line) on
/// error; the old configuration then stays in force. The first call happens only after a
/// change: the caller loads the files once at start itself (and refuses to start on error).
pub fn watch<F>(
    what: &'static str,
    paths: Vec<PathBuf>,
    poll: Duration,
    stop: CancellationToken,
    reload: F,
) -> JoinHandle<()>
where
    F: Fn() -> Result<(), String> + Send + 'static,
{
    // Listening starts here, not in the task: a SIGHUP sent once `watch` returned is seen
    // (and never takes its default action, which ends the process).
    #[cfg(unix)]
    let mut hup = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) {
        Ok(s) => Some(s),
        Err(e) => {
            tracing::warn!(error = %e, file = what, "cannot listen for SIGHUP; reloading on change only");
            None
        }
    };
    // Zero series from the start, so that the first refused reload is an increase an alert
    // sees (a series born at 1 shows none).
    for result in ["ok", "error"] {
        metrics::counter!(RELOADS, "file" => what, "result" => result).increment(0);
    }
    let mut seen = fingerprint(&paths);
    tokio::spawn(async move {
        loop {
            #[cfg(unix)]
            let hup_recv = async {
                match hup.as_mut() {
                    Some(s) => s.recv().await,
                    None => std::future::pending().await,
                }
            };
            #[cfg(not(unix))]
            let hup_recv = std::future::pending::<Option<()>>();
            let forced = tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(poll) => false,
                _ = hup_recv => true,
            };
            let now = fingerprint(&paths);
            if !forced && now == seen {
                continue;
            }
            seen = now;
            match reload() {
                Ok(()) => {
                    tracing::info!(file = what, paths = ?paths, sighup = forced, "reloaded");
                    metrics::counter!(RELOADS, "file" => what, "result" => "ok").increment(1);
                }
                Err(e) => {
                    tracing::error!(file = what, paths = ?paths, error = %e, "reload refused; the previous one stays in force");
                    metrics::counter!(RELOADS, "file" => what, "result" => "error").increment(1);
                }
            }
        }
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    #[tokio::test]
    async fn reloads_on_change_only_and_keeps_going_after_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, "one").unwrap();
        let calls = Arc::new(AtomicUsize::new(0));
        let stop = CancellationToken::new();
        let c = calls.clone();
        let task = watch(
            "test",
            vec![path.clone()],
            Duration::from_millis(20),
            stop.clone(),
            move || {
                let n = c.fetch_add(1, Ordering::SeqCst);
                if n == 0 {
                    Err("bad".into())
                } else {
                    Ok(())
                }
            },
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(calls.load(Ordering::SeqCst), 0, "no change, no reload");
        std::fs::write(&path, "two").unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(
            calls.load(Ordering::SeqCst),
            1,
            "one change, one reload (refused)"
        );
        std::fs::write(&path, "three").unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(
            calls.load(Ordering::SeqCst),
            2,
            "the next change is tried again"
        );
        stop.cancel();
        task.await.unwrap();
    }
}
