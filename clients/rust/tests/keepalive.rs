//! The connection's HTTP/2 keepalive (`ClientOptions::keepalive`) against a real jobwire: a
//! Subscribe stream to a frozen server (SIGSTOP) fails once a PING goes unanswered, after
//! interval + timeout; a client that pings every second is not cut off (the server has no
//! ping rate limit).

mod support;

use std::time::{Duration, Instant};

use jobwire_client::pb::worker_service_client::WorkerServiceClient;
use jobwire_client::{pb, Client, ClientOptions, Error, Keepalive};
use support::proxy::Proxy;

fn keepalive(interval_s: u64, timeout_s: u64) -> ClientOptions {
    ClientOptions {
        keepalive: Keepalive {
            interval: Duration::from_secs(interval_s),
            timeout: Duration::from_secs(timeout_s),
            without_calls: true,
        },
        ..Default::default()
    }
}

fn signal(pid: u32, sig: &str) {
    let ok = std::process::Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .expect("kill")
        .success();
    assert!(ok, "kill {sig} {pid}");
}

#[tokio::test]
async fn a_stream_to_a_frozen_server_fails_after_interval_plus_timeout() {
    let server = support::server(&[]).await;
    let pid = server.pid().expect("pid");
    // 1 s + 12 s: no sooner than the timeout, so the option reaches the connection (the
    // default's 10 s + 5 s would end it sooner than 13 s after the last frame only by luck).
    let client = Client::connect(&server.target(), keepalive(1, 12))
        .await
        .expect("connect");
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tx.send(pb::SubscribeRequest {
        message: Some(pb::subscribe_request::Message::Open(pb::OpenStream {
            queues: vec![support::queue("ka")],
            credits: 1,
            worker_id: "ka".into(),
        })),
    })
    .await
    .expect("send open");
    let mut stream = WorkerServiceClient::new(client.conn())
        .subscribe(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
        .expect("subscribe")
        .into_inner();
    // The open is through once a unary call on the same connection is answered.
    let missing = client.get_job("ka", "none").await;
    assert!(
        matches!(missing, Err(Error::Status(ref s)) if s.code() == tonic::Code::NotFound),
        "{missing:?}"
    );
    signal(pid, "-STOP");
    let frozen = Instant::now();
    let ended = tokio::time::timeout(Duration::from_secs(60), stream.message()).await;
    let took = frozen.elapsed();
    signal(pid, "-CONT");
    let err = ended
        .expect("the frozen stream ended within 60 s")
        .expect_err("the frozen stream ends with an error");
    assert!(
        took >= Duration::from_secs(11) && took < Duration::from_secs(45),
        "the frozen stream failed after {took:?} ({err:?}); want interval + timeout (13 s)"
    );
    drop(tx);
}

#[tokio::test]
async fn a_client_that_pings_every_second_is_not_cut_off() {
    let server = support::server(&[]).await;
    let proxy = Proxy::start(server.grpc_port()).await;
    let client = Client::connect(&format!("127.0.0.1:{}", proxy.port), keepalive(1, 1))
        .await
        .expect("connect");
    let q = support::queue("ka-ping");
    client
        .enqueue(&q, "k", b"{}".to_vec(), Default::default())
        .await
        .expect("enqueue");
    tokio::time::sleep(Duration::from_secs(5)).await; // idle: a PING a second, no call open
    assert!(!client.list_queues().await.expect("list").is_empty());
    assert_eq!(
        proxy.connections(),
        1,
        "the server closed the pinging connection"
    );
}

#[tokio::test]
async fn a_keepalive_under_a_second_is_refused() {
    let o = ClientOptions {
        keepalive: Keepalive {
            interval: Duration::from_millis(500),
            ..Keepalive::default()
        },
        ..Default::default()
    };
    let r = Client::connect("127.0.0.1:1", o).await.err();
    assert!(matches!(r, Some(Error::InvalidArgument(_))), "{r:?}");
}
