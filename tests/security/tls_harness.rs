//! Servers over TLS for the security suite: [`tls_config`] (a test config serving the PKI's
//! server certificate, with mTLS or not), [`start_server_with`] (an in-process server reached
//! over TLS), [`tls_channel`] (a client that trusts a CA, with a client certificate or not),
//! and [`server_serial`] (which certificate a new connection is served).

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use jobwire::config::ServeArgs;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Identity};

use crate::certs::{CertFiles, TestPki};
use crate::harness::{test_config, TestApp};

/// A test config serving `server` over TLS; with `client_ca`, clients need a certificate
/// (mTLS) issued by it. The files are polled every 100ms.
pub fn tls_config(redis_url: &str, server: &CertFiles, client_ca: Option<&Path>) -> ServeArgs {
    let mut cfg = test_config(redis_url);
    cfg.tls.tls_cert = Some(server.cert.clone());
    cfg.tls.tls_key = Some(server.key.clone());
    cfg.tls.tls_client_ca = client_ca.map(Path::to_path_buf);
    cfg.tls.tls_reload_interval = Duration::from_millis(100);
    cfg
}

/// A TLS channel to `addr` (server name `localhost`) trusting the CA in `ca`, presenting
/// `identity` when given. The error is the connect's (a refused handshake).
pub async fn tls_channel(
    addr: SocketAddr,
    ca: &Path,
    identity: Option<&CertFiles>,
) -> Result<Channel, tonic::transport::Error> {
    let ca = std::fs::read_to_string(ca).expect("ca file");
    let mut tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(ca))
        .domain_name("localhost");
    if let Some(id) = identity {
        tls = tls.identity(Identity::from_pem(id.cert_pem(), id.key_pem()));
    }
    Channel::from_shared(format!("https://{addr}"))
        .expect("uri")
        .tls_config(tls)?
        .connect_timeout(Duration::from_secs(5))
        .connect()
        .await
}

/// Starts an in-process server with `cfg` (TLS on) whose harness channel trusts `ca` and
/// presents `identity`.
pub async fn start_server_with(cfg: ServeArgs, ca: &Path, identity: Option<&CertFiles>) -> TestApp {
    let ca = ca.to_path_buf();
    let identity = identity.cloned();
    TestApp::spawn_with(cfg, move |addr| async move {
        tls_channel(addr, &ca, identity.as_ref())
            .await
            .expect("tls connect to jobwire")
    })
    .await
}

/// A TLS server on `pki`'s server certificate (serial 1, files `server.crt`/`server.key`),
/// with mTLS when `mtls`; the harness channel presents `identity`.
pub async fn start_tls(
    redis_url: &str,
    pki: &TestPki,
    mtls: bool,
    identity: Option<&CertFiles>,
) -> (TestApp, CertFiles) {
    let server = pki.server("server", 1);
    let ca = pki.ca_path();
    let cfg = tls_config(redis_url, &server, mtls.then_some(ca.as_path()));
    (start_server_with(cfg, &ca, identity).await, server)
}

/// The serial number (hex, as x509-parser prints it) of the certificate a new TLS connection
/// to `addr` is served, verified against `ca`; `identity` is presented when given.
pub async fn server_serial(addr: SocketAddr, ca: &str, identity: Option<&CertFiles>) -> String {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(ca.as_bytes()).expect("ca pem"))
        .expect("ca");
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots);
    let mut config = match identity {
        Some(id) => builder
            .with_client_auth_cert(
                vec![CertificateDer::from_pem_slice(id.cert_pem().as_bytes()).expect("cert")],
                PrivateKeyDer::from_pem_slice(id.key_pem().as_bytes()).expect("key"),
            )
            .expect("client cert"),
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"h2".to_vec()];
    let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from("localhost").expect("name"), tcp)
        .await
        .expect("tls handshake");
    let leaf = &tls.get_ref().1.peer_certificates().expect("server cert")[0];
    let (_, cert) = x509_parser::parse_x509_certificate(leaf).expect("x509");
    cert.raw_serial_as_string()
}

/// The serial number (hex, as [`server_serial`] gives it) of the first certificate in `pem`.
pub fn pem_serial(pem: &str) -> String {
    use rustls::pki_types::pem::PemObject;
    let der = rustls::pki_types::CertificateDer::from_pem_slice(pem.as_bytes()).expect("pem");
    let (_, cert) = x509_parser::parse_x509_certificate(&der).expect("x509");
    cert.raw_serial_as_string()
}
