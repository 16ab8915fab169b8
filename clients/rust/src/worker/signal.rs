//! SIGTERM and SIGINT start a graceful shutdown; a second signal ends the grace at once
//! (linkerd's and restate's convention). Off Unix: Ctrl-C.

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// Watches for the signals: the first cancels `shutdown`, the second `hurry`.
pub(super) fn watch(
    shutdown: CancellationToken,
    hurry: CancellationToken,
) -> std::io::Result<JoinHandle<()>> {
    #[cfg(unix)]
    let (mut term, mut int) = {
        use tokio::signal::unix::{signal, SignalKind};
        (
            signal(SignalKind::terminate())?,
            signal(SignalKind::interrupt())?,
        )
    };
    Ok(tokio::spawn(async move {
        let mut seen = 0;
        loop {
            #[cfg(unix)]
            let name = tokio::select! {
                _ = term.recv() => "SIGTERM",
                _ = int.recv() => "SIGINT",
            };
            #[cfg(not(unix))]
            let name = {
                let _ = tokio::signal::ctrl_c().await;
                "Ctrl-C"
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
