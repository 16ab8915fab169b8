//! Memory before authorization (issue 31, item 1), against the real binary: request bytes a
//! client makes the server buffer are bounded by `--max-buffered-request-bytes-per-connection`
//! and `--max-buffered-request-bytes`, health and reflection take only tiny messages, a
//! principal that may call the RPC on no queue is refused before its body is read, and an
//! authorized client's Enqueue -> lease -> Ack goes on during each attack.
//!
//! The server's RSS is read from /proc/<pid>/status (VmRSS sampled every 20 ms, and VmHWM);
//! jemalloc keeps freed pages for a while, so the peak during the attack is what counts.
//! The attacker is the `h2` crate's client: it honours flow control and
//! SETTINGS_MAX_CONCURRENT_STREAMS, so it gets exactly as far as the server lets it.

mod attack;
mod server;

use crate::secured::Who;

use attack::*;
use server::*;

/// The path of JobService.Enqueue.
const ENQUEUE: &str = "/jobwire.v1.JobService/Enqueue";

fn principals() -> (Who, Who, Who) {
    let honest = Who::new("honest", &[(&["honest-*"], &["producer", "worker"])]);
    let nobody = Who::new("no-grants", &[]);
    let big = Who::new("big-producer", &[(&["big-*"], &["producer"])]);
    (honest, nobody, big)
}

/// (a) No token: one connection, every stream the server allows, each holding all but the
/// last byte of a 3.5 MiB health check (under tonic's 4 MiB default, which health had).
#[tokio::test]
async fn unauthenticated_streams_cannot_fill_memory() {
    let (honest, nobody, big) = principals();
    let server = Server::start(&[&honest, &nobody, &big]).await;
    let h = HonestThread::start(server.grpc, &honest).await;
    let addr = server.grpc;
    under_attack(
        "no token, one connection",
        &server,
        h,
        PER_CONNECTION,
        Latency::Unaffected,
        |report| async move {
            // Streams the server refuses at once free their place: at most 200 tries.
            let health = "/grpc.health.v1.Health/Check";
            hold_on_connection(addr, health, None, 3 * MIB + MIB / 2, 200, false, &report).await
        },
    )
    .await;
}

/// (b) A token with no grants: 16 concurrent 50 MiB Enqueue bodies on one connection.
#[tokio::test]
async fn a_principal_without_grants_is_refused_before_its_body() {
    let (honest, nobody, big) = principals();
    let server = Server::start(&[&honest, &nobody, &big]).await;
    let h = HonestThread::start(server.grpc, &honest).await;
    let addr = server.grpc;
    let token = nobody.token.reveal();
    // Refused before a byte is buffered: only HTTP/2 windows (1 MiB a connection) and noise.
    let Answers { statuses, .. } = under_attack(
        "no grants, 16 x 50 MiB",
        &server,
        h,
        32 * MIB,
        Latency::Unaffected,
        |report| async move {
            let held =
                hold_on_connection(addr, ENQUEUE, Some(&token), 50 * MIB, 16, false, &report).await;
            assert_eq!(held.len(), 16, "a stream for each body");
            held
        },
    )
    .await;
    assert_eq!(
        statuses.get(PERMISSION_DENIED),
        Some(&16),
        "every call refused for the role: {statuses:?}"
    );
}

/// (c) An authorized producer: 10 connections, each holding all but the last byte of a
/// 60 MiB Enqueue (fits the per-connection budget): the process budget bounds them all.
#[tokio::test]
async fn an_authorized_principal_is_bounded_by_the_process_budget() {
    let (honest, nobody, big) = principals();
    let server = Server::start(&[&honest, &nobody, &big]).await;
    let h = HonestThread::start(server.grpc, &honest).await;
    let addr = server.grpc;
    let token = big.token.reveal();
    let Answers { statuses, messages } = under_attack(
        "authorized, 10 connections x 60 MiB",
        &server,
        h,
        PROCESS + 64 * MIB,
        Latency::Shared,
        |report| async move {
            let mut held = Vec::new();
            for _ in 0..10 {
                let one =
                    hold_on_connection(addr, ENQUEUE, Some(&token), 60 * MIB, 1, false, &report)
                        .await;
                assert_eq!(one.len(), 1, "a stream on each connection");
                held.extend(one);
            }
            held
        },
    )
    .await;
    // 160 MiB hold at most two whole unfinished 60 MiB messages: streams are refused past it.
    assert!(
        statuses.get(RESOURCE_EXHAUSTED).copied().unwrap_or(0) > 0
            && messages
                .iter()
                .any(|m| m.contains("(--max-buffered-request-bytes)")),
        "refused past the process budget, naming the flag: {statuses:?} {messages:?}"
    );
}

/// (d) An authorized producer, one connection: every stream the server allows holding all but
/// the last byte of a 3.5 MiB Enqueue: the connection's budget bounds them. Messages under
/// 8 MiB are small allocations for jemalloc, which keeps the freed pages of the refused ones
/// for up to its 10 s decay: RSS may rise to about twice the budget (measured 1.8 times).
#[tokio::test]
async fn one_connection_is_bounded_by_its_budget() {
    let (honest, nobody, big) = principals();
    let server = Server::start(&[&honest, &nobody, &big]).await;
    let h = HonestThread::start(server.grpc, &honest).await;
    let addr = server.grpc;
    let token = big.token.reveal();
    let Answers { statuses, messages } = under_attack(
        "authorized, one connection, streams x 3.5 MiB",
        &server,
        h,
        2 * PER_CONNECTION + 32 * MIB,
        Latency::Shared,
        |report| async move {
            let len = 3 * MIB + MIB / 2;
            hold_on_connection(addr, ENQUEUE, Some(&token), len, 200, false, &report).await
        },
    )
    .await;
    assert!(
        statuses.get(RESOURCE_EXHAUSTED).copied().unwrap_or(0) > 0
            && messages
                .iter()
                .any(|m| m.contains("(--max-buffered-request-bytes-per-connection)")),
        "refused past the connection's budget, naming the flag: {statuses:?} {messages:?}"
    );
}

/// (e) An authorized producer, four connections, every stream each allows holding all but
/// the last byte of a 3.5 MiB Enqueue: the process budget bounds them (within twice: RSS
/// counts the pages jemalloc kept from the refused messages, as in (d)).
#[tokio::test]
async fn many_connections_of_small_messages_are_bounded_by_the_process_budget() {
    let (honest, nobody, big) = principals();
    let server = Server::start(&[&honest, &nobody, &big]).await;
    let h = HonestThread::start(server.grpc, &honest).await;
    let addr = server.grpc;
    let token = big.token.reveal();
    under_attack(
        "authorized, 4 connections x streams x 3.5 MiB",
        &server,
        h,
        2 * PROCESS + 64 * MIB,
        Latency::Shared,
        |report| async move {
            let mut held = Vec::new();
            for _ in 0..4 {
                let len = 3 * MIB + MIB / 2;
                held.extend(
                    hold_on_connection(addr, ENQUEUE, Some(&token), len, 100, true, &report).await,
                );
            }
            held
        },
    )
    .await;
}
