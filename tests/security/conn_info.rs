//! Every request carries the [`ConnInfo`] of its connection (id, peer address, and with mTLS
//! the client's certificate chain), read with `transport::conn_info` in a real tonic service
//! served over jobwire's listener.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use jobwire::config::TlsArgs;
use jobwire::transport::{self, ConnInfo, ServerTls};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use tokio_util::sync::CancellationToken;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

use crate::certs::{ClientId, TestPki, Validity};
use crate::tls_harness::tls_channel;

/// A health service over jobwire's listener (TLS with `tls`) that records the [`ConnInfo`]
/// of every request; returns its address, the records and the stop token.
async fn recording_server(
    tls: Option<Arc<ServerTls>>,
) -> (
    std::net::SocketAddr,
    Arc<Mutex<Vec<Option<ConnInfo>>>>,
    CancellationToken,
) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = seen.clone();
    let (_reporter, health) = tonic_health::server::health_reporter();
    let svc = InterceptedService::new(health, move |req: tonic::Request<()>| {
        record
            .lock()
            .expect("lock")
            .push(transport::conn_info(&req).cloned());
        Ok(req)
    });
    let stop = CancellationToken::new();
    let signal = stop.clone().cancelled_owned();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(svc)
            .serve_with_incoming_shutdown(
                transport::incoming(listener, tls, Default::default()),
                signal,
            ),
    );
    (addr, seen, stop)
}

async fn check(ch: Channel) {
    HealthClient::new(ch)
        .check(HealthCheckRequest {
            service: String::new(),
        })
        .await
        .expect("health check");
}

fn der(pem: &str) -> CertificateDer<'static> {
    CertificateDer::from_pem_slice(pem.as_bytes()).expect("pem")
}

#[tokio::test]
async fn an_mtls_request_carries_the_client_certificate_chain_and_its_connection() {
    let pki = TestPki::new("jobwire test CA");
    let server = pki.server("server", 1);
    let client = pki.client(
        "worker",
        ClientId::Uri("spiffe://jobwire.test/worker".into()),
        Validity::Current,
    );
    let args = TlsArgs {
        tls_cert: Some(server.cert.clone()),
        tls_key: Some(server.key.clone()),
        tls_client_ca: Some(pki.ca_path()),
        tls_reload_interval: Duration::from_secs(2),
    };
    let tls = ServerTls::load(&args).expect("load").expect("tls on");
    let (addr, seen, stop) = recording_server(Some(tls)).await;
    let ch = tls_channel(addr, &pki.ca_path(), Some(&client))
        .await
        .expect("connect");
    check(ch.clone()).await;
    check(ch).await;
    let other = tls_channel(addr, &pki.ca_path(), Some(&client))
        .await
        .expect("connect");
    check(other).await;
    stop.cancel();

    let seen = seen.lock().expect("lock").clone();
    assert_eq!(seen.len(), 3);
    let infos: Vec<ConnInfo> = seen.into_iter().map(|i| i.expect("conn info")).collect();
    for info in &infos {
        let chain = info.peer_certs.as_ref().expect("the client's chain");
        assert_eq!(chain[0], der(&client.cert_pem()), "leaf first");
        let remote = info.remote_addr.expect("peer address");
        assert!(remote.ip().is_loopback(), "{remote}");
    }
    assert_eq!(infos[0].id, infos[1].id, "one connection, one id");
    assert_ne!(infos[0].id, infos[2].id, "another connection, another id");
}

#[tokio::test]
async fn without_mtls_a_request_carries_its_connection_and_no_certificate() {
    let pki = TestPki::new("jobwire test CA");
    let server = pki.server("server", 1);
    let args = TlsArgs {
        tls_cert: Some(server.cert.clone()),
        tls_key: Some(server.key.clone()),
        ..TlsArgs::default()
    };
    let tls = ServerTls::load(&args).expect("load").expect("tls on");
    for tls in [Some(tls), None] {
        let on = tls.is_some();
        let (addr, seen, stop) = recording_server(tls).await;
        let ch = if on {
            tls_channel(addr, &pki.ca_path(), None)
                .await
                .expect("connect")
        } else {
            crate::harness::plain_channel(addr).await
        };
        check(ch).await;
        stop.cancel();
        let info = seen.lock().expect("lock")[0].clone().expect("conn info");
        assert!(info.peer_certs.is_none(), "tls {on}: no client certificate");
        assert!(info.remote_addr.is_some(), "tls {on}: the peer address");
    }
}
