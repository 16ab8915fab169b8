//! `serve` flags of the gRPC port's TLS (`--tls-cert`, `--tls-key`, `--tls-client-ca`,
//! `--tls-reload-interval`).

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

/// Shortest `--tls-reload-interval`: the poll reads and hashes every file each time.
const MIN_RELOAD_INTERVAL: Duration = Duration::from_millis(100);
/// Longest `--tls-reload-interval`.
const MAX_RELOAD_INTERVAL: Duration = Duration::from_secs(3600);

/// TLS settings of the gRPC port. No files: plaintext gRPC.
#[derive(Clone, Debug, Args)]
pub struct TlsArgs {
    /// Serve gRPC over TLS (rustls) with this PEM certificate chain, leaf first (needs
    /// --tls-key). Reloaded without a restart when the file changes or on SIGHUP: new
    /// connections get the new certificate, open streams go on.
    #[arg(long, env = "JOBWIRE_TLS_CERT", value_name = "FILE")]
    pub tls_cert: Option<PathBuf>,

    /// The PEM private key (PKCS#8, PKCS#1 or SEC1) of --tls-cert.
    #[arg(long, env = "JOBWIRE_TLS_KEY", value_name = "FILE")]
    pub tls_key: Option<PathBuf>,

    /// Require a client certificate (mTLS) issued by one of the CA certificates in this PEM
    /// file (needs --tls-cert and --tls-key). Reloaded like them.
    #[arg(long, env = "JOBWIRE_TLS_CLIENT_CA", value_name = "FILE")]
    pub tls_client_ca: Option<PathBuf>,

    /// How often the TLS files are read to see whether they changed (100ms..=1h).
    #[arg(long, env = "JOBWIRE_TLS_RELOAD_INTERVAL", default_value = "2s", value_parser = humantime::parse_duration)]
    pub tls_reload_interval: Duration,
}

impl Default for TlsArgs {
    fn default() -> Self {
        TlsArgs {
            tls_cert: None,
            tls_key: None,
            tls_client_ca: None,
            tls_reload_interval: crate::reload::DEFAULT_POLL,
        }
    }
}

impl TlsArgs {
    /// Is TLS on (both --tls-cert and --tls-key given)?
    pub fn enabled(&self) -> bool {
        self.tls_cert.is_some() && self.tls_key.is_some()
    }

    /// Checks what clap cannot; the error names the flag. With TLS on, also reads the files
    /// and builds the server's TLS configuration once, so that a file that is not PEM, a key
    /// that does not match the certificate or a CA file with no certificate stops the start
    /// with the flag and file named.
    pub fn validate(&self) -> Result<(), String> {
        match (&self.tls_cert, &self.tls_key) {
            (Some(_), None) => return Err("--tls-cert needs --tls-key".into()),
            (None, Some(_)) => return Err("--tls-key needs --tls-cert".into()),
            (None, None) if self.tls_client_ca.is_some() => {
                return Err("--tls-client-ca needs --tls-cert and --tls-key".into())
            }
            _ => {}
        }
        if !(MIN_RELOAD_INTERVAL..=MAX_RELOAD_INTERVAL).contains(&self.tls_reload_interval) {
            return Err(format!(
                "--tls-reload-interval must be between 100ms and 1h, got {}",
                humantime::format_duration(self.tls_reload_interval)
            ));
        }
        if self.enabled() {
            crate::transport::tls::load(self)?;
        }
        Ok(())
    }

    /// `JOBWIRE_*=value` lines for `--print-config` (paths only, never file contents).
    pub fn effective(&self) -> Vec<(&'static str, String)> {
        let p = |p: &Option<PathBuf>| {
            p.as_ref()
                .map(|p| p.display().to_string())
                .unwrap_or_default()
        };
        vec![
            ("JOBWIRE_TLS_CERT", p(&self.tls_cert)),
            ("JOBWIRE_TLS_KEY", p(&self.tls_key)),
            ("JOBWIRE_TLS_CLIENT_CA", p(&self.tls_client_ca)),
            (
                "JOBWIRE_TLS_RELOAD_INTERVAL",
                humantime::format_duration(self.tls_reload_interval).to_string(),
            ),
        ]
    }
}
