//! TLS and mTLS on the gRPC port, each over real TLS against a real server: who is served,
//! who is refused (and that a refused client changes nothing in Redis), and the expiry gauge.

use std::time::Duration;

use jobwire::pb;
use jobwire::pb::job_service_client::JobServiceClient;
use tonic::transport::Channel;

use crate::certs::{ClientId, TestPki, Validity, CURRENT_NOT_AFTER};
use crate::harness::{
    enqueue, eventually, get_job, http_get, metric_value, spec, TestRedis, TestWorker,
};
use crate::tls_harness::{start_tls, tls_channel};

/// Enqueue job `id` on queue `queue` over `ch`.
async fn enqueue_on(ch: Channel, queue: &str, id: &str) -> Result<(), tonic::Status> {
    JobServiceClient::new(ch)
        .enqueue(pb::EnqueueRequest {
            job: Some(spec(queue, id)),
        })
        .await
        .map(|_| ())
}

/// The keys of Redis that mention `queue`.
async fn keys_of(redis: &TestRedis, queue: &str) -> Vec<String> {
    redis::cmd("KEYS")
        .arg(format!("*{queue}*"))
        .query_async(&mut redis.conn().await)
        .await
        .expect("keys")
}

/// A client that cannot complete TLS: either the connect or its first call fails (with TLS
/// 1.3 the server may refuse a client certificate only after the client thinks it is in).
/// Returns what failed, for the assertion message.
async fn refused<F>(connect: F, queue: &str) -> String
where
    F: std::future::Future<Output = Result<Channel, tonic::transport::Error>>,
{
    let attempt = async {
        match connect.await {
            Err(e) => Err(format!("connect: {e:?}")),
            Ok(ch) => enqueue_on(ch, queue, "x")
                .await
                .map_err(|s| format!("call: {s:?}")),
        }
    };
    match tokio::time::timeout(Duration::from_secs(15), attempt).await {
        Ok(Ok(())) => panic!("the client was served"),
        Ok(Err(e)) => e,
        Err(_) => "timed out".into(),
    }
}

#[tokio::test]
async fn a_plaintext_client_gets_nothing_from_a_tls_port() {
    let redis = TestRedis::start().await;
    let pki = TestPki::new("jobwire test CA");
    let (app, _) = start_tls(&redis.url, &pki, false, None).await;
    let endpoint = Channel::from_shared(format!("http://{}", app.grpc))
        .expect("uri")
        .connect_timeout(Duration::from_secs(5));
    let why = refused(endpoint.connect(), "tls-plain").await;
    println!("plaintext client: {why}");
    assert!(keys_of(&redis, "tls-plain").await.is_empty());
}

#[tokio::test]
async fn a_client_that_trusts_the_ca_enqueues_and_works_jobs_on_a_stream() {
    let redis = TestRedis::start().await;
    let pki = TestPki::new("jobwire test CA");
    let (app, _) = start_tls(&redis.url, &pki, false, None).await;
    enqueue(&app, spec("tls-q", "a")).await;
    let mut w = TestWorker::open(&app, &["tls-q"], 4, "w").await;
    let lease = w.lease().await;
    assert_eq!(lease.job.as_ref().expect("job").job_id, "a");
    assert_eq!(w.ack(&lease).await.code, 0);
    assert_eq!(
        get_job(&app, "tls-q", "a").await.state,
        pb::JobState::Completed as i32
    );
    // A client that trusts another CA refuses the server's certificate.
    let other = TestPki::new("another CA");
    let err = tls_channel(app.grpc, &other.ca_path(), None)
        .await
        .expect_err("the server's certificate is not trusted");
    println!("untrusting client: {err:?}");
}

#[tokio::test]
async fn mtls_serves_client_certificates_of_the_ca_with_a_uri_san_a_dns_san_or_a_cn() {
    let redis = TestRedis::start().await;
    let pki = TestPki::new("jobwire test CA");
    let uri = pki.client(
        "uri",
        ClientId::Uri("spiffe://jobwire.test/worker".into()),
        Validity::Current,
    );
    let (app, _) = start_tls(&redis.url, &pki, true, Some(&uri)).await;
    enqueue(&app, spec("mtls-q", "a")).await;
    let mut w = TestWorker::open(&app, &["mtls-q"], 4, "w").await;
    let lease = w.lease().await;
    assert_eq!(w.ack(&lease).await.code, 0);

    let dns = pki.client(
        "dns",
        ClientId::Dns("worker.jobwire.test".into()),
        Validity::Current,
    );
    let cn = pki.client(
        "cn",
        ClientId::Cn("cn-only-worker".into()),
        Validity::Current,
    );
    for (what, id) in [("dns san", &dns), ("cn only", &cn)] {
        let ch = tls_channel(app.grpc, &pki.ca_path(), Some(id))
            .await
            .unwrap_or_else(|e| panic!("{what}: {e:?}"));
        enqueue_on(ch, "mtls-q", what)
            .await
            .unwrap_or_else(|e| panic!("{what}: {e:?}"));
    }
}

#[tokio::test]
async fn mtls_refuses_no_certificate_an_unknown_ca_and_an_expired_certificate() {
    let redis = TestRedis::start().await;
    let pki = TestPki::new("jobwire test CA");
    let good = pki.client(
        "good",
        ClientId::Uri("spiffe://jobwire.test/good".into()),
        Validity::Current,
    );
    let (app, _) = start_tls(&redis.url, &pki, true, Some(&good)).await;
    let other = TestPki::new("another CA");
    let stranger = other.client(
        "stranger",
        ClientId::Uri("spiffe://jobwire.test/good".into()),
        Validity::Current,
    );
    let expired = pki.client(
        "expired",
        ClientId::Uri("spiffe://jobwire.test/good".into()),
        Validity::Expired,
    );
    let ca = pki.ca_path();
    for (what, id) in [
        ("no client certificate", None),
        ("a certificate of another CA", Some(&stranger)),
        ("an expired certificate", Some(&expired)),
    ] {
        let why = refused(tls_channel(app.grpc, &ca, id), "mtls-refused").await;
        println!("{what}: {why}");
    }
    assert!(
        keys_of(&redis, "mtls-refused").await.is_empty(),
        "no refused client reached Redis"
    );
    // The good client is still served.
    enqueue_on(app.channel.clone(), "mtls-ok", "a")
        .await
        .expect("good client");
}

#[tokio::test]
async fn a_silent_client_does_not_hold_up_the_handshakes_of_others() {
    let redis = TestRedis::start().await;
    let pki = TestPki::new("jobwire test CA");
    let (app, _) = start_tls(&redis.url, &pki, false, None).await;
    // Connected, says nothing (or half a ClientHello), and stays.
    let _silent = tokio::net::TcpStream::connect(app.grpc)
        .await
        .expect("connect");
    let mut slow = tokio::net::TcpStream::connect(app.grpc)
        .await
        .expect("connect");
    tokio::io::AsyncWriteExt::write_all(&mut slow, &[0x16, 0x03, 0x01])
        .await
        .expect("write");
    let ch = tls_channel(app.grpc, &pki.ca_path(), None)
        .await
        .expect("a new client is served while the others hang");
    enqueue_on(ch, "tls-silent", "a").await.expect("enqueue");
}

#[tokio::test]
async fn the_certificate_expiry_is_a_gauge() {
    let redis = TestRedis::start().await;
    let pki = TestPki::new("jobwire test CA");
    let (app, _) = start_tls(&redis.url, &pki, false, None).await;
    eventually(Duration::from_secs(5), || async {
        let page = http_get(app.http, "/metrics").await;
        page.contains("# HELP jobwire_tls_cert_expiry_timestamp_seconds ")
            && metric_value(&page, "jobwire_tls_cert_expiry_timestamp_seconds", &[])
                == Some(CURRENT_NOT_AFTER as f64)
    })
    .await;
}
