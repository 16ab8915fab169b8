//! The attacker: an HTTP/2 client (the `h2` crate, which honours flow control and
//! SETTINGS_MAX_CONCURRENT_STREAMS) that holds unfinished messages open on many streams.

use std::future::poll_fn;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::server::*;

/// grpc-status values as the answers carry them.
pub(super) const PERMISSION_DENIED: &str = "7";
pub(super) const RESOURCE_EXHAUSTED: &str = "8";

/// The attacker's message bytes, shared by every stream.
pub(super) static ZEROS: std::sync::OnceLock<Bytes> = std::sync::OnceLock::new();

/// An attacking HTTP/2 connection.
pub(super) async fn h2_connect(addr: SocketAddr) -> h2::client::SendRequest<Bytes> {
    let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
    tcp.set_nodelay(true).expect("nodelay");
    let (client, conn) = h2::client::handshake(tcp).await.expect("h2 handshake");
    tokio::spawn(async move {
        let _ = conn.await;
    });
    client
}

/// What became of one attacking stream.
#[derive(Debug)]
pub(super) struct Outcome {
    /// The grpc-status and grpc-message the server answered with, if it answered.
    pub(super) status: Option<(String, String)>,
}

/// Opens a stream to `path` (with `token`, if any), sends the header of a `len`-byte message
/// and all of it but its last byte, as fast as flow control allows (for 6 s), and holds the
/// stream open (until the task is aborted), reporting what became of it to `report`. `None`
/// when the connection has no stream left to give within 1 s (its
/// SETTINGS_MAX_CONCURRENT_STREAMS is reached).
pub(super) async fn hold_message(
    client: &mut h2::client::SendRequest<Bytes>,
    addr: SocketAddr,
    path: &str,
    token: Option<&str>,
    len: usize,
    report: &mpsc::UnboundedSender<Outcome>,
) -> Option<JoinHandle<()>> {
    let ready = tokio::time::timeout(Duration::from_secs(1), client.clone().ready()).await;
    let mut ready = match ready {
        Ok(Ok(r)) => r,
        _ => return None,
    };
    let mut req = http::Request::builder()
        .method("POST")
        .uri(format!("http://{addr}{path}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers");
    if let Some(t) = token {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    let (response, mut send) = ready
        .send_request(req.body(()).expect("request"), false)
        .ok()?;
    *client = ready;
    let mut header = vec![0u8];
    header.extend_from_slice(&(len as u32).to_be_bytes());
    let report = report.clone();
    Some(tokio::spawn(async move {
        let status = tokio::spawn(async move {
            let resp = tokio::time::timeout(Duration::from_secs(60), response).await;
            let header = |r: &http::Response<h2::RecvStream>, name: &str| {
                r.headers()
                    .get(name)
                    .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
            };
            match resp {
                Ok(Ok(r)) => Some((
                    header(&r, "grpc-status").unwrap_or_else(|| "(in trailers)".into()),
                    header(&r, "grpc-message").unwrap_or_default(),
                )),
                Ok(Err(e)) => Some((format!("(reset: {:?})", e.reason()), String::new())),
                Err(_) => None,
            }
        });
        // All of it but the last byte, handed to h2 at once (one shared buffer, sliced): h2
        // sends it as the server's flow-control windows open, and drops it if the server
        // resets the stream.
        let body = ZEROS
            .get_or_init(|| Bytes::from(vec![0x5a; 64 * MIB]))
            .slice(..len - 1);
        // A refused stream fails these sends: what became of it is in its answer.
        let _ = send
            .send_data(Bytes::from(header), false)
            .and_then(|()| send.send_data(body, false));
        // Let it flow (or be refused) for 6 s.
        let _ =
            tokio::time::timeout(Duration::from_secs(6), poll_fn(|cx| send.poll_reset(cx))).await;
        let status = tokio::time::timeout(Duration::from_secs(1), status)
            .await
            .ok()
            .and_then(Result::ok)
            .flatten();
        let _ = report.send(Outcome { status });
        // Hold the stream (and its unsent last byte) until the test aborts the task.
        let _keep = send;
        std::future::pending::<()>().await;
    }))
}

/// How much the honest client's p99 may rise under an attack.
#[derive(Clone, Copy, Debug)]
pub(super) enum Latency {
    /// The attack is refused before its bytes are buffered (no token, no grants): the honest
    /// p99 stays within twice the quiet one (+50 ms, at least 250 ms).
    Unaffected,
    /// The attacker is authorized and pushes hundreds of MiB through the same two cores as the
    /// honest client and the server: CPU is shared, so the bound is against starvation (a
    /// call waiting on memory or on the attacker's streams), not against sharing: within five
    /// times the quiet p99 (+100 ms, at least 1 s).
    Shared,
}

impl Latency {
    fn allowed(self, quiet_p99: Duration) -> Duration {
        match self {
            Latency::Unaffected => {
                (quiet_p99 * 2 + Duration::from_millis(50)).max(Duration::from_millis(250))
            }
            Latency::Shared => {
                (quiet_p99 * 5 + Duration::from_millis(100)).max(Duration::from_secs(1))
            }
        }
    }
}

/// Runs `attack` while the honest client cycles; checks the RSS rise and the honest p99
/// against `latency`.
/// `attack` returns the attacking streams' tasks once they are all under way.
pub(super) async fn under_attack<F, Fut>(
    name: &str,
    server: &Server,
    mut honest: HonestThread,
    rss_bound: usize,
    latency: Latency,
    attack: F,
) -> Answers
where
    F: FnOnce(mpsc::UnboundedSender<Outcome>) -> Fut,
    Fut: std::future::Future<Output = Vec<JoinHandle<()>>>,
{
    let (report, mut outcomes) = mpsc::unbounded_channel();
    let (base_rss, base_hwm) = server.memory();
    let sampler = RssPeak::start(server.pid);
    honest.go();
    let t = Instant::now();
    let streams = attack(report).await;
    // Let every stream push what flow control lets through (6 s), then keep holding.
    tokio::time::sleep(Duration::from_secs(8)).await;
    let (lat, failed) = honest.stop().await;
    let quiet = &honest.quiet;
    let peak = sampler.stop().await;
    let (_, hwm) = server.memory();
    let mut statuses = std::collections::BTreeMap::<String, usize>::new();
    let mut messages = std::collections::BTreeSet::<String>::new();
    let mut reported = 0;
    while let Ok(o) = outcomes.try_recv() {
        reported += 1;
        let (status, message) = o
            .status
            .unwrap_or_else(|| ("(no answer)".into(), String::new()));
        if !message.is_empty() {
            messages.insert(message);
        }
        *statuses.entry(status).or_default() += 1;
    }
    let opened = streams.len();
    for s in streams {
        s.abort();
        let _ = s.await;
    }
    let rise = peak.saturating_sub(base_rss);
    let hwm_rise = hwm.saturating_sub(base_hwm.max(base_rss));
    let quiet_p99 = p99(quiet);
    let attack_p99 = if lat.is_empty() {
        Duration::MAX
    } else {
        p99(&lat)
    };
    eprintln!(
        "{name}: server RSS {} MiB before, peak rise {} MiB (VmHWM rise {} MiB) over {:.1} s; \
         {opened} streams ({reported} done pushing) grpc-status {statuses:?} {messages:?}; \
         honest cycles: {} quiet p99 {:?}, {} under attack p99 {:?}, {} failed",
        base_rss / MIB,
        rise / MIB,
        hwm_rise / MIB,
        t.elapsed().as_secs_f64(),
        quiet.len(),
        quiet_p99,
        lat.len(),
        attack_p99,
        failed.len(),
    );
    assert!(failed.is_empty(), "{name}: honest calls failed: {failed:?}");
    assert!(
        lat.len() >= 20,
        "{name}: only {} honest cycles in the attack",
        lat.len()
    );
    let allowed = latency.allowed(quiet_p99);
    assert!(
        attack_p99 < allowed,
        "{name}: honest p99 {attack_p99:?} under attack, quiet {quiet_p99:?}"
    );
    assert!(
        rise < rss_bound,
        "{name}: server RSS rose by {} MiB, bound {} MiB",
        rise / MIB,
        rss_bound / MIB
    );
    Answers { statuses, messages }
}

/// What the attacking streams were answered.
pub(super) struct Answers {
    /// How many streams got each grpc-status (or `(no answer)`, `(reset: <reason>)`).
    pub(super) statuses: std::collections::BTreeMap<String, usize>,
    /// The distinct grpc-messages.
    pub(super) messages: std::collections::BTreeSet<String>,
}

/// One attacking connection: up to `tries` streams to `path`, each holding all but the last
/// byte of a `len`-byte message ([`hold_message`]), until the connection gives no stream
/// more. With `settle`, waits 200 ms for the server's SETTINGS first, so that no stream is
/// opened past its limit.
pub(super) async fn hold_on_connection(
    addr: SocketAddr,
    path: &str,
    token: Option<&str>,
    len: usize,
    tries: usize,
    settle: bool,
    report: &mpsc::UnboundedSender<Outcome>,
) -> Vec<JoinHandle<()>> {
    let mut c = h2_connect(addr).await;
    if settle {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let mut held = Vec::new();
    for _ in 0..tries {
        match hold_message(&mut c, addr, path, token, len, report).await {
            Some(t) => held.push(t),
            None => break,
        }
    }
    held
}
