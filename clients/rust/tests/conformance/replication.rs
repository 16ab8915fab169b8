//! unreplicated_enqueue_exists_once: an Enqueue without a job_id that fails NOT_REPLICATED is
//! retried with the id the error names, and the job exists once.

use std::io::{Read, Write};

use jobwire_client::EnqueueOptions;

use crate::support;

/// grpc_server_handled_total of `method` answered `code` on the server's /metrics (0 if absent).
fn handled(http_port: u16, method: &str, code: &str) -> f64 {
    let mut conn = std::net::TcpStream::connect(("127.0.0.1", http_port)).expect("connect");
    write!(
        conn,
        "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .expect("send");
    let mut text = String::new();
    conn.read_to_string(&mut text).expect("read /metrics");
    let want = [
        format!("grpc_method=\"{method}\""),
        format!("grpc_code=\"{code}\""),
    ];
    text.lines()
        .find(|l| l.starts_with("grpc_server_handled_total{") && want.iter().all(|w| l.contains(w)))
        .and_then(|l| l.rsplit(' ').next())
        .map(|v| v.parse().expect("a number"))
        .unwrap_or(0.0)
}

#[tokio::test]
async fn unreplicated_enqueue_exists_once() {
    let (server, _) = crate::server_for("unreplicated_enqueue_exists_once").await;
    let client = server.client().await.expect("connect");
    let q = support::queue("unreplicated");
    let err = client
        .enqueue(&q, "work", b"x".to_vec(), EnqueueOptions::default())
        .await
        .expect_err("NOT_REPLICATED: the Redis has no replica");
    assert_eq!(err.code(), Some(tonic::Code::Unavailable), "{err}");
    let id = err
        .not_replicated_job_id()
        .unwrap_or_else(|| panic!("the error names no job id: {err}"));
    let job = client.get_job(&q, &id).await.expect("GetJob");
    assert_eq!(job.job_id, id);
    let stats = client.get_queue_stats(&q).await.expect("stats");
    assert_eq!((stats.waiting, stats.delayed, stats.active), (1, 0, 0));
    let port = server.http_port();
    let n = tokio::task::spawn_blocking(move || handled(port, "Enqueue", "Unavailable"))
        .await
        .expect("scrape");
    assert!(
        n > 1.0,
        "the SDK retried with the job id: {n} Enqueues answered Unavailable"
    );
}
