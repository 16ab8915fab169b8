//! What the gRPC port's deadlines leave alone and what they end, with short deadlines
//! (`--grpc-preface-timeout` 500ms, keepalive PING after 1 s of silence, answer due in 1 s):
//! a worker stream waiting quietly for work and an idle connection whose HTTP/2 stack answers
//! PINGs live on well past them; a connection that sent its preface and then falls silent
//! (answers no PING) is closed by the keepalive; one that sends nothing (after its TLS
//! handshake, with TLS) by the preface deadline.

use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::conn_harness::closed_by_server;
use crate::h2raw::RawH2;
use crate::harness::*;

async fn app() -> (TestRedis, TestApp) {
    let redis = TestRedis::start().await;
    let mut cfg = test_config(&redis.url);
    cfg.conn.grpc_preface_timeout = Duration::from_millis(500);
    cfg.conn.grpc_keepalive_interval = Duration::from_secs(1);
    cfg.conn.grpc_keepalive_timeout = Duration::from_secs(1);
    let app = TestApp::spawn(cfg).await;
    (redis, app)
}

#[tokio::test]
async fn an_idle_worker_stream_and_an_idle_live_connection_outlive_the_deadlines() {
    let (_redis, app) = app().await;
    let mut worker = TestWorker::open(&app, &["idle-q"], 1, "quiet-worker").await;
    let mut idle = RawH2::connect(app.grpc).await;
    // Five times the preface deadline plus the keepalive's interval and timeout.
    assert!(
        !idle.closed_within(Duration::from_secs(5)).await,
        "an idle connection that answers PINGs is kept"
    );
    enqueue(&app, spec("idle-q", "after-the-quiet")).await;
    let lease = tokio::time::timeout(Duration::from_secs(10), worker.lease())
        .await
        .expect("the quiet worker's stream is still open and gets the job");
    assert_eq!(lease.job.expect("job").job_id, "after-the-quiet");
}

#[tokio::test]
async fn connections_silent_before_or_after_their_preface_are_closed() {
    let (_redis, app) = app().await;
    let mut silent = TcpStream::connect(app.grpc).await.expect("connect");
    let mut half = TcpStream::connect(app.grpc).await.expect("connect");
    half.write_all(b"PRI * HTTP/2.0\r\n").await.expect("write");
    // The preface and SETTINGS, then nothing: its PINGs go unanswered.
    let mut mute = TcpStream::connect(app.grpc).await.expect("connect");
    mute.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0")
        .await
        .expect("write");
    let patience = Duration::from_secs(20);
    let (silent, half, mute) = tokio::join!(
        closed_by_server(&mut silent, patience),
        closed_by_server(&mut half, patience),
        closed_by_server(&mut mute, patience),
    );
    for (what, took) in [("silent", silent), ("half a preface", half)] {
        let took = took.unwrap_or_else(|| panic!("{what}: not closed within 20 s"));
        assert!(
            took <= Duration::from_secs(5),
            "{what}: closed after {took:?}"
        );
    }
    let took = mute.expect("silent after the preface: closed by the keepalive within 20 s");
    assert!(
        took >= Duration::from_millis(1500) && took <= Duration::from_secs(8),
        "closed by the keepalive (PING after 1 s, 1 s to answer), not the preface deadline: {took:?}"
    );
}

#[tokio::test]
async fn a_tls_connection_silent_after_its_handshake_is_closed() {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, ServerName};
    use std::sync::Arc;
    use tokio::io::AsyncReadExt;

    let redis = TestRedis::start().await;
    let pki = crate::certs::TestPki::new("jobwire preface test CA");
    let server = pki.server("server", 1);
    let mut cfg = crate::tls_harness::tls_config(&redis.url, &server, None);
    cfg.conn.grpc_preface_timeout = Duration::from_millis(500);
    let app = crate::tls_harness::start_server_with(cfg, &pki.ca_path(), None).await;

    let ca = std::fs::read_to_string(pki.ca_path()).expect("ca");
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(ca.as_bytes()).expect("ca pem"))
        .expect("ca");
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("versions")
    .with_root_certificates(roots)
    .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec()];
    let tcp = TcpStream::connect(app.grpc).await.expect("connect");
    let mut tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from("localhost").expect("name"), tcp)
        .await
        .expect("the tls handshake completes");
    // The handshake is done; the client sends no preface.
    let start = std::time::Instant::now();
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout(Duration::from_secs(20), tls.read(&mut buf)).await {
            Err(_) => panic!("a tls connection without a preface is kept past 20 s"),
            Ok(Ok(0)) | Ok(Err(_)) => break,
            Ok(Ok(_)) => {}
        }
    }
    assert!(
        start.elapsed() <= Duration::from_secs(5),
        "closed after {:?}",
        start.elapsed()
    );
}
