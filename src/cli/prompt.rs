//! Confirmation of destructive actions (purge, queue delete, dead-letter replay and delete):
//! asked on stderr and answered on stdin, only when stdin is a terminal. Without a terminal
//! and without `--yes` the command refuses (exit 2) before changing anything, so a script
//! never hangs on a prompt nobody sees, nor acts without having said so.

use std::io::{BufRead, IsTerminal, Write};

use super::CliError;

/// Asks `question` (`[y/N]` is added) unless `yes`. Ok: go ahead. Errors: stdin is not a
/// terminal (usage, exit 2: add `--yes`), or the answer was not yes (exit 1, nothing done).
pub fn confirm(question: &str, yes: bool) -> Result<(), CliError> {
    if yes {
        return Ok(());
    }
    let stdin = std::io::stdin();
    if !stdin.is_terminal() {
        return Err(CliError::usage(format!(
            "cannot ask {question:?}: stdin is not a terminal; add --yes to confirm (nothing was changed)"
        )));
    }
    let mut err = std::io::stderr().lock();
    let _ = write!(err, "{question} [y/N] ");
    let _ = err.flush();
    let mut answer = String::new();
    stdin
        .lock()
        .read_line(&mut answer)
        .map_err(|e| CliError::Other(format!("cannot read the answer: {e}")))?;
    match answer.trim().to_ascii_lowercase().as_str() {
        "y" | "yes" => Ok(()),
        _ => Err(CliError::Other("not confirmed: nothing was changed".into())),
    }
}
