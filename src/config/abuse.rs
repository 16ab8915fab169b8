//! `serve` flags of the abuse limits: streams per connection and per principal, HTTP/2
//! settings, idle streams, connection age.

use clap::Args;

/// Abuse limits of the gRPC port.
#[derive(Clone, Debug, Default, Args)]
pub struct AbuseArgs {}

impl AbuseArgs {
    /// Checks what clap cannot; the error names the flag.
    pub fn validate(&self) -> Result<(), String> {
        Ok(())
    }

    /// `JOBWIRE_*=value` lines for `--print-config`.
    pub fn effective(&self) -> Vec<(&'static str, String)> {
        Vec::new()
    }
}
