//! Process signals: the first SIGTERM or SIGINT starts a graceful shutdown, a second one exits now.
//!
//! SIGTERM (Kubernetes, systemd) and SIGINT (Ctrl-C) are treated alike, as linkerd does, and the
//! caller logs which one arrived. [`exit_on_second_signal`] is the escape hatch for an operator
//! whose shutdown is stuck: it exits with status 130 without waiting for the grace period.
//!
//! Both functions register their handlers when *called* (inside a tokio runtime), so a signal that
//! arrives between start-up and the first poll is not lost. Once registered, tokio keeps the
//! handlers for the life of the process, so the default "terminate" action no longer applies.

use std::io;

use tokio::signal::unix::{signal as unix_signal, Signal, SignalKind};

/// Exit status used when a second signal cuts a graceful shutdown short (128 + SIGINT).
pub const FORCED_EXIT_CODE: i32 = 130;

/// Resolves on the first SIGTERM or SIGINT and returns its name (`"SIGTERM"` or `"SIGINT"`).
///
/// The handlers are registered when this is called (so call it inside a tokio runtime), not when
/// the future is first polled. If a handler cannot be installed (which does not happen on a normal Unix), the failure is
/// logged and that signal is simply never reported.
pub fn signal() -> impl std::future::Future<Output = &'static str> + Send + 'static {
    let listeners = Listeners::register();
    async move {
        let mut listeners = listeners;
        listeners.next().await
    }
}

/// Spawns a task that exits the process with status 130 on the *second* SIGTERM/SIGINT.
///
/// The first signal is left to [`signal`] and the graceful path; call this once at start-up,
/// from inside the tokio runtime.
pub fn exit_on_second_signal() {
    let mut listeners = Listeners::register();
    tokio::spawn(async move {
        let first = listeners.next().await;
        tracing::debug!(
            signal = first,
            "first signal seen; a second one exits immediately"
        );
        let second = listeners.next().await;
        tracing::warn!(
            signal = second,
            code = FORCED_EXIT_CODE,
            "second signal, exiting without waiting for shutdown"
        );
        std::process::exit(FORCED_EXIT_CODE);
    });
}

/// SIGTERM and SIGINT streams, registered eagerly.
struct Listeners {
    term: Option<Signal>,
    int: Option<Signal>,
}

impl Listeners {
    fn register() -> Self {
        Self {
            term: install(SignalKind::terminate(), "SIGTERM"),
            int: install(SignalKind::interrupt(), "SIGINT"),
        }
    }

    /// Waits for the next delivery of either signal.
    async fn next(&mut self) -> &'static str {
        tokio::select! {
            Some(()) = recv(&mut self.term) => "SIGTERM",
            Some(()) = recv(&mut self.int) => "SIGINT",
            // Both streams ended: the runtime is shutting down, so nothing will be delivered.
            else => std::future::pending().await,
        }
    }
}

fn install(kind: SignalKind, name: &'static str) -> Option<Signal> {
    match unix_signal(kind) {
        Ok(s) => Some(s),
        Err(err) => {
            log_install_error(name, &err);
            None
        }
    }
}

fn log_install_error(name: &str, err: &io::Error) {
    tracing::error!(signal = name, error = %err, "cannot install signal handler");
}

/// Next delivery on `s`; pends forever if there is no handler (so `select!` ignores that arm).
async fn recv(s: &mut Option<Signal>) -> Option<()> {
    match s {
        Some(s) => s.recv().await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn send(sig: &str) {
        let status = std::process::Command::new("kill")
            .args([sig, &std::process::id().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success());
    }

    // One test sends both signals in sequence: signal handlers are process-wide, so parallel
    // tests each sending a signal would see each other's deliveries.
    #[tokio::test]
    async fn reports_which_signal_arrived() {
        let first = signal(); // registered now, before the signal is sent
        send("-TERM");
        let got = tokio::time::timeout(Duration::from_secs(10), first)
            .await
            .expect("SIGTERM seen");
        assert_eq!(got, "SIGTERM");

        let second = signal();
        send("-INT");
        let got = tokio::time::timeout(Duration::from_secs(10), second)
            .await
            .expect("SIGINT seen");
        assert_eq!(got, "SIGINT");
    }
}
