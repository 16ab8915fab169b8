//! SIGTERM and SIGINT start a graceful shutdown; a second signal ends the grace at once
//! (linkerd's and restate's convention).

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// Watches for the signals: the first cancels `shutdown`, the second `hurry`.
pub(super) fn watch(
    shutdown: CancellationToken,
    hurry: CancellationToken,
) -> std::io::Result<JoinHandle<()>> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    Ok(tokio::spawn(async move {
        let mut seen = 0;
        loop {
            let name = tokio::select! {
                _ = term.recv() => "SIGTERM",
                _ = int.recv() => "SIGINT",
            };
            seen += 1;
            if seen == 1 {
                tracing::info!(signal = name, "shutting down: draining held jobs");
                shutdown.cancel();
            } else {
                tracing::warn!(signal = name, "second signal: ending the grace now");
                hurry.cancel();
            }
        }
    }))
}
