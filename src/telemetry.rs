//! Tracing set-up: an `EnvFilter` from `RUST_LOG` and a human or JSON formatter on stderr.
//!
//! Called once by `main` before anything logs. It is idempotent (a second call, e.g. from another
//! test in the same process, keeps the first subscriber) so tests can call it freely. Logs go to
//! stderr so that stdout stays clean for output such as `--print-config`.
//!
//! Log lines cannot be forged by a client: call sites log client strings through
//! [`Untrusted`] (control characters escaped), the text format keeps each event on one line
//! ([`OneLine`]), and the JSON format escapes control characters itself (one object a line).

mod one_line;
mod untrusted;

pub use one_line::{OneLine, OneLineWriter};
pub use untrusted::{needs_escape, Untrusted};

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
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    // `try_init` fails only when a global subscriber is already set; keeping it is what we want.
    let _already_set = match format {
        LogFormat::Pretty => builder.with_writer(OneLine).try_init(),
        LogFormat::Json => builder
            .with_writer(std::io::stderr)
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
