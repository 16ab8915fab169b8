//! `serve` flags of the gRPC port's TLS (`--tls-cert`, `--tls-key`, `--tls-client-ca`).

use clap::Args;

/// TLS settings of the gRPC port. Empty: plaintext gRPC.
#[derive(Clone, Debug, Default, Args)]
pub struct TlsArgs {}

impl TlsArgs {
    /// Checks what clap cannot; the error names the flag.
    pub fn validate(&self) -> Result<(), String> {
        Ok(())
    }

    /// `JOBWIRE_*=value` lines for `--print-config`.
    pub fn effective(&self) -> Vec<(&'static str, String)> {
        Vec::new()
    }
}
