//! `serve` flags of authentication and authorization (`--auth-file`, `--insecure`, ...).

use clap::Args;

/// Who may call what. Empty: no authentication (loopback only).
#[derive(Clone, Debug, Default, Args)]
pub struct AuthArgs {}

impl AuthArgs {
    /// Checks what clap cannot; the error names the flag.
    pub fn validate(&self) -> Result<(), String> {
        Ok(())
    }

    /// `JOBWIRE_*=value` lines for `--print-config`.
    pub fn effective(&self) -> Vec<(&'static str, String)> {
        Vec::new()
    }
}
