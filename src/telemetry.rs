//! Tracing set-up: an `EnvFilter` from `RUST_LOG` and a human or JSON formatter on stderr.
//!
//! Called once by `main` before anything logs. It is idempotent (a second call, e.g. from another
//! test in the same process, keeps the first subscriber) so tests can call it freely. Logs go to
//! stderr so that stdout stays clean for output such as `--print-config`.

use tracing_subscriber::EnvFilter;

use crate::config::LogFormat;

/// Filter used when `RUST_LOG` is unset or does not parse.
pub const DEFAULT_FILTER: &str = "info,jobwire=info";

/// Installs the global tracing subscriber; later calls are no-ops.
pub fn init(format: LogFormat) {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(DEFAULT_FILTER));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    // `try_init` fails only when a global subscriber is already set; keeping it is what we want.
    let _already_set = match format {
        LogFormat::Pretty => builder.try_init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_span_list(false)
            .try_init(),
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn init_is_idempotent() {
        init(LogFormat::Json);
        init(LogFormat::Pretty);
        tracing::info!(event = "still_works", "logging after two inits");
    }
}
