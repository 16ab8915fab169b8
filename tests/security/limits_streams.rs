//! Worker streams per connection (`--max-streams-per-connection`): N streams open on one
//! connection, the next Subscribe is refused with RESOURCE_EXHAUSTED naming the limit and
//! the flag (Redis unchanged), other connections are not affected, and a place comes free
//! when a stream ends.

use std::time::Duration;

use jobwire::pb;
use jobwire::pb::worker_service_client::WorkerServiceClient;
use tokio::sync::mpsc;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tonic::transport::Channel;
use tonic_types::StatusExt;

use crate::harness::*;
use crate::refusal::snapshot;

/// Opens a Subscribe on `channel`; the refusal, if any, comes back before any message.
pub async fn subscribe(
    channel: &Channel,
    queue: &str,
) -> Result<
    (
        mpsc::UnboundedSender<pb::SubscribeRequest>,
        tonic::Streaming<pb::SubscribeResponse>,
    ),
    tonic::Status,
> {
    let (tx, rx) = mpsc::unbounded_channel();
    tx.send(pb::SubscribeRequest {
        message: Some(pb::subscribe_request::Message::Open(pb::OpenStream {
            queues: vec![queue.into()],
            credits: 1,
            worker_id: String::new(),
        })),
    })
    .expect("send");
    let r = WorkerServiceClient::new(channel.clone())
        .subscribe(UnboundedReceiverStream::new(rx))
        .await?;
    Ok((tx, r.into_inner()))
}

pub async fn new_channel(app: &TestApp) -> Channel {
    Channel::from_shared(format!("http://{}", app.grpc))
        .expect("uri")
        .connect()
        .await
        .expect("connect")
}

/// Asserts `s` is the refusal of a stream past `flag`'s `limit`.
pub fn assert_stream_refusal(s: &tonic::Status, flag: &str, limit: u32) {
    assert_eq!(s.code(), tonic::Code::ResourceExhausted, "{s:?}");
    assert!(
        s.message().contains(&format!("--{flag}")),
        "{}",
        s.message()
    );
    assert!(
        s.message().contains(&format!("at most {limit}")),
        "{}",
        s.message()
    );
    let d = s.get_error_details();
    assert_eq!(
        d.error_info().map(|i| i.reason.as_str()),
        Some("TOO_MANY_STREAMS")
    );
    let q = d.quota_failure().expect("quota failure");
    assert_eq!(q.violations[0].subject, flag);
}

#[tokio::test]
async fn streams_per_connection_are_capped_and_a_place_frees_when_one_ends() {
    let redis = TestRedis::start().await;
    let mut cfg = test_config(&redis.url);
    cfg.abuse.max_streams_per_connection = 3;
    let app = TestApp::spawn(cfg).await;

    let mut open = Vec::new();
    for _ in 0..3 {
        open.push(
            subscribe(&app.channel, "q")
                .await
                .expect("within the limit"),
        );
    }
    let before = snapshot(&redis).await;
    let refused = subscribe(&app.channel, "q").await.expect_err("the fourth");
    assert_stream_refusal(&refused, "max-streams-per-connection", 3);
    assert_eq!(
        snapshot(&redis).await,
        before,
        "the refusal changed nothing"
    );

    // Another connection has its own count.
    let other = new_channel(&app).await;
    let _other_stream = subscribe(&other, "q").await.expect("another connection");

    // One stream ends (the worker drops it): its place comes free.
    drop(open.pop());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        match subscribe(&app.channel, "q").await {
            Ok(s) => {
                open.push(s);
                break;
            }
            Err(s) => {
                assert_stream_refusal(&s, "max-streams-per-connection", 3);
                assert!(tokio::time::Instant::now() < deadline, "no place came free");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    let refused = subscribe(&app.channel, "q").await.expect_err("full again");
    assert_stream_refusal(&refused, "max-streams-per-connection", 3);
}

#[tokio::test]
async fn streams_per_principal_are_capped_across_connections() {
    use crate::secured::{auth_yaml, Clients, Who};
    let a = Who::new("team-a", &[(&["*"], &["worker"])]);
    let b = Who::new("team-b", &[(&["*"], &["worker"])]);
    let dir = tempfile::tempdir().expect("dir");
    let auth_file = dir.path().join("auth.yaml");
    std::fs::write(&auth_file, auth_yaml(&[&a, &b])).expect("write");
    let redis = TestRedis::start().await;
    let mut cfg = test_config(&redis.url);
    cfg.auth.auth_file = Some(auth_file);
    cfg.abuse.max_streams_per_principal = 2;
    let app = TestApp::spawn(cfg).await;

    // Each stream on a connection of its own: the count is the principal's.
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut c = Clients::new(&new_channel(&app).await, a.bearer());
        held.push(c.subscribe(&["q"], 1).await.expect("within the limit"));
    }
    let before = snapshot(&redis).await;
    let mut c = Clients::new(&new_channel(&app).await, a.bearer());
    let refused = c.subscribe(&["q"], 1).await.err().expect("the third");
    assert_stream_refusal(&refused, "max-streams-per-principal", 2);
    assert_eq!(
        snapshot(&redis).await,
        before,
        "the refusal changed nothing"
    );

    // Another principal has its own count.
    let mut other = Clients::new(&new_channel(&app).await, b.bearer());
    let _b_stream = other.subscribe(&["q"], 1).await.expect("team-b");

    // One of team-a's streams ends: its place comes free.
    drop(held.pop());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        match c.subscribe(&["q"], 1).await {
            Ok(s) => {
                held.push(s);
                break;
            }
            Err(s) => {
                assert_stream_refusal(&s, "max-streams-per-principal", 2);
                assert!(tokio::time::Instant::now() < deadline, "no place came free");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

#[tokio::test]
async fn without_auth_callers_are_not_counted_as_one_principal() {
    let redis = TestRedis::start().await;
    let mut cfg = test_config(&redis.url);
    cfg.abuse.max_streams_per_principal = 1;
    let app = TestApp::spawn(cfg).await;
    let mut open = Vec::new();
    for _ in 0..3 {
        let ch = new_channel(&app).await;
        open.push(
            subscribe(&ch, "q")
                .await
                .expect("anonymous streams are not capped as one"),
        );
    }
}
