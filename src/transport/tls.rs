//! The gRPC port's TLS configuration: built from the PEM files of `--tls-cert`, `--tls-key`
//! and `--tls-client-ca` (rustls, ring provider, ALPN `h2`), kept behind an [`ArcSwap`] so a
//! reload swaps it for new connections only, and re-read by [`crate::reload::watch`] when the
//! files change or on SIGHUP.
//!
//! Invariant: what serves is always a configuration that loaded completely; a file that fails
//! to load (at start: the server refuses to start; on reload: logged and counted, the old one
//! stays) never replaces it.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arc_swap::ArcSwap;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::config::TlsArgs;

/// Gauge: the `notAfter` of the server certificate in force, Unix seconds (alert well before
/// it: a certificate that expires stops every new connection).
pub const CERT_EXPIRY: &str = "jobwire_tls_cert_expiry_timestamp_seconds";

/// A server TLS configuration that loaded, with what the server reports about it.
pub struct Loaded {
    /// The rustls configuration (certificate, key, client verifier, ALPN `h2`).
    pub config: ServerConfig,
    /// The leaf certificate's `notAfter`, Unix seconds.
    pub not_after: i64,
    /// The leaf certificate's serial number, hex (for the reload log line).
    pub serial: String,
}

/// The ring provider: jobwire never uses aws-lc-rs (TOOLING.md).
fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn read(flag: &str, path: &Path) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| format!("{flag} {}: cannot read: {e}", path.display()))
}

/// The certificates of a PEM file (other PEM sections are skipped); an error names the flag.
fn certificates(flag: &str, path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let bytes = read(flag, path)?;
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{flag} {}: not valid PEM: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!(
            "{flag} {}: no certificate in the file (expected PEM \"-----BEGIN CERTIFICATE-----\")",
            path.display()
        ));
    }
    Ok(certs)
}

/// Reads and checks the files of `args` (TLS must be on) and builds the configuration. The
/// error names the flag and the file: unreadable, not PEM, no certificate, no or an
/// unsupported key, a key that does not match the certificate, a client CA that is not one.
pub fn load(args: &TlsArgs) -> Result<Loaded, String> {
    let (Some(cert_path), Some(key_path)) = (&args.tls_cert, &args.tls_key) else {
        return Err("--tls-cert and --tls-key are both needed for TLS".into());
    };
    let provider = provider();
    let chain = certificates("--tls-cert", cert_path)?;
    let (serial, not_after) = {
        let (_, leaf) = x509_parser::parse_x509_certificate(&chain[0]).map_err(|e| {
            format!(
                "--tls-cert {}: the first certificate is not valid X.509: {e}",
                cert_path.display()
            )
        })?;
        (
            leaf.raw_serial_as_string(),
            leaf.validity().not_after.timestamp(),
        )
    };
    let key_bytes = read("--tls-key", key_path)?;
    let key = PrivateKeyDer::from_pem_slice(&key_bytes).map_err(|e| match e {
        rustls::pki_types::pem::Error::NoItemsFound => format!(
            "--tls-key {}: no private key in the file (expected PEM PKCS#8, PKCS#1 or SEC1)",
            key_path.display()
        ),
        e => format!("--tls-key {}: not valid PEM: {e}", key_path.display()),
    })?;
    provider
        .key_provider
        .load_private_key(key.clone_key())
        .map_err(|e| format!("--tls-key {}: unsupported key: {e}", key_path.display()))?;

    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS protocol versions: {e}"))?;
    let builder = match &args.tls_client_ca {
        None => builder.with_no_client_auth(),
        Some(ca_path) => {
            let mut roots = RootCertStore::empty();
            for (i, ca) in certificates("--tls-client-ca", ca_path)?
                .into_iter()
                .enumerate()
            {
                roots.add(ca).map_err(|e| {
                    format!(
                        "--tls-client-ca {}: certificate {} is not a usable CA certificate: {e}",
                        ca_path.display(),
                        i + 1
                    )
                })?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| format!("--tls-client-ca {}: {e}", ca_path.display()))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder.with_single_cert(chain, key).map_err(|e| match e {
        rustls::Error::InconsistentKeys(_) => format!(
            "--tls-key {} does not match the certificate of --tls-cert {}",
            key_path.display(),
            cert_path.display()
        ),
        e => format!(
            "--tls-cert {} with --tls-key {}: {e}",
            cert_path.display(),
            key_path.display()
        ),
    })?;
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(Loaded {
        config,
        not_after,
        serial,
    })
}

/// The TLS configuration in force: each new connection takes [`ServerTls::current`], a reload
/// replaces it for the connections that follow (open ones keep theirs).
pub struct ServerTls {
    args: TlsArgs,
    current: ArcSwap<ServerConfig>,
}

impl ServerTls {
    /// Loads the files of `args`: `Ok(None)` when TLS is off; the error names flag and file.
    pub fn load(args: &TlsArgs) -> Result<Option<Arc<ServerTls>>, String> {
        if !args.enabled() {
            return Ok(None);
        }
        let loaded = load(args)?;
        report(&loaded);
        tracing::info!(serial = %loaded.serial, mtls = args.tls_client_ca.is_some(), "grpc serves TLS");
        Ok(Some(Arc::new(ServerTls {
            args: args.clone(),
            current: ArcSwap::from_pointee(loaded.config),
        })))
    }

    /// The configuration for a new connection.
    pub fn current(&self) -> Arc<ServerConfig> {
        self.current.load_full()
    }

    /// Re-reads the files; on success new connections use them, on error nothing changes.
    pub fn reload(&self) -> Result<(), String> {
        let loaded = load(&self.args)?;
        report(&loaded);
        tracing::info!(serial = %loaded.serial, "tls certificate loaded");
        self.current.store(Arc::new(loaded.config));
        Ok(())
    }

    /// The files a reload reads.
    fn paths(&self) -> Vec<PathBuf> {
        [
            &self.args.tls_cert,
            &self.args.tls_key,
            &self.args.tls_client_ca,
        ]
        .into_iter()
        .flatten()
        .cloned()
        .collect()
    }

    /// Reloads on change (polled every `--tls-reload-interval`) and on SIGHUP until `stop`.
    pub fn watch(self: &Arc<Self>, stop: CancellationToken) -> JoinHandle<()> {
        let this = self.clone();
        crate::reload::watch(
            "tls",
            self.paths(),
            self.args.tls_reload_interval,
            stop,
            move || this.reload(),
        )
    }
}

/// Sets the expiry gauge, and warns when the certificate is already expired.
fn report(loaded: &Loaded) {
    metrics::gauge!(CERT_EXPIRY).set(loaded.not_after as f64);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or_default();
    if loaded.not_after <= now {
        tracing::warn!(serial = %loaded.serial, not_after = loaded.not_after, "the tls certificate of --tls-cert has expired: clients will refuse it");
    }
}
