//! Printing a result in the chosen format: the serde view as JSON or YAML, or the table a
//! command renders for people. Everything goes to stdout; messages go to stderr elsewhere.

use std::io::Write;

use serde::Serialize;

use super::global::Format;
use super::CliError;

/// Prints `value` as JSON or YAML, or `table()` for the table format, on stdout.
pub fn print<T: Serialize>(
    format: Format,
    value: &T,
    table: impl FnOnce(&T) -> String,
) -> Result<(), CliError> {
    let text = match format {
        Format::Json => {
            let mut s = serde_json::to_string_pretty(value)
                .map_err(|e| CliError::Other(format!("cannot encode JSON: {e}")))?;
            s.push('\n');
            s
        }
        Format::Yaml => serde_norway::to_string(value)
            .map_err(|e| CliError::Other(format!("cannot encode YAML: {e}")))?,
        Format::Table => table(value),
    };
    let mut out = std::io::stdout().lock();
    // A closed pipe (`| head`) is not an error worth a message.
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(CliError::Other(format!("cannot write to stdout: {e}")))
        }
        _ => Ok(()),
    }
}
