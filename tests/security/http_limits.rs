//! The HTTP port's limits (issue 31, item 1's HTTP part), against the real binary: a flood of
//! `POST /ui/login` with 2 MB bodies gets 413 without the bodies being read, so the server's
//! memory stays flat (it was +352 MiB over h2c, which the port no longer speaks); a body sent
//! too slowly gets 408 after `--http-request-timeout`; an idle keep-alive connection is
//! closed after `--http-header-read-timeout`.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::task::JoinSet;

use crate::conn_harness::*;
use crate::harness::TestRedis;
use crate::secured::{auth_yaml, Who};

const BODY: usize = 2_000_000;
const FLOOD: usize = 150;
/// The most the flood may raise the server's resident memory (it was +352 MiB).
const RSS_BUDGET_MIB: u64 = 64;

/// Reads until the end of a response head; its status code, or `None` if the server closed
/// first.
async fn status(s: &mut TcpStream, patience: Duration) -> Option<u16> {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !got.windows(4).any(|w| w == b"\r\n\r\n") {
        match tokio::time::timeout(patience, s.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => got.extend_from_slice(&buf[..n]),
            _ => return None,
        }
    }
    let head = String::from_utf8_lossy(&got);
    head.split(' ').nth(1)?.parse().ok()
}

/// One `POST /ui/login` with a 2 MB body (sent while the server reads it); its status.
async fn big_login(http: SocketAddr, chunked: bool) -> Option<u16> {
    let mut s = TcpStream::connect(http).await.ok()?;
    let framing = if chunked {
        "Transfer-Encoding: chunked".to_owned()
    } else {
        format!("Content-Length: {BODY}")
    };
    let head = format!(
        "POST /ui/login HTTP/1.1\r\nHost: {http}\r\nContent-Type: application/x-www-form-urlencoded\r\n{framing}\r\n\r\n"
    );
    s.write_all(head.as_bytes()).await.ok()?;
    let chunk = vec![b'a'; 64 << 10];
    let (mut rd, mut wr) = s.into_split();
    let writer = tokio::spawn(async move {
        let mut left = BODY;
        while left > 0 {
            let n = left.min(chunk.len());
            let ok = if chunked {
                let mut c = format!("{n:x}\r\n").into_bytes();
                c.extend_from_slice(&chunk[..n]);
                c.extend_from_slice(b"\r\n");
                wr.write_all(&c).await
            } else {
                wr.write_all(&chunk[..n]).await
            };
            if ok.is_err() {
                return;
            }
            left -= n;
        }
        if chunked {
            let _ = wr.write_all(b"0\r\n\r\n").await;
        }
        // Keep the write half open until the answer is read.
        tokio::time::sleep(Duration::from_secs(60)).await;
    });
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let code = loop {
        if let Some(i) = got.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&got[..i]).into_owned();
            break head.split(' ').nth(1).and_then(|c| c.parse().ok());
        }
        match tokio::time::timeout(Duration::from_secs(60), rd.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => got.extend_from_slice(&buf[..n]),
            _ => break None,
        }
    };
    writer.abort();
    code
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_login_flood_with_2_mb_bodies_gets_413_and_memory_stays_flat() {
    let viewer = Who::new("viewer", &[(&["*"], &["viewer"])]);
    let dir = tempfile::tempdir().expect("tempdir");
    let auth_file = dir.path().join("auth.yaml");
    write_atomically(&auth_file, &auth_yaml(&[&viewer]));
    let redis = TestRedis::start().await;
    let auth_arg = auth_file.to_str().expect("utf-8 path");
    let server = Server::start(1024, &redis.url, &["--ui", "--auth-file", auth_arg]).await;
    let before = server.vm_kib("VmRSS");

    let peak = Arc::new(AtomicU64::new(before));
    let sampler = {
        let peak = peak.clone();
        let pid = server.pid;
        tokio::spawn(async move {
            loop {
                if let Ok(s) = std::fs::read_to_string(format!("/proc/{pid}/status")) {
                    if let Some(kib) = s
                        .lines()
                        .find_map(|l| l.strip_prefix("VmRSS:"))
                        .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())
                    {
                        peak.fetch_max(kib, Ordering::Relaxed);
                    }
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };
    let mut flood = JoinSet::new();
    for i in 0..FLOOD {
        flood.spawn(big_login(server.http, i % 10 == 0));
    }
    let mut codes = std::collections::BTreeMap::new();
    while let Some(c) = flood.join_next().await {
        *codes.entry(c.expect("task")).or_insert(0) += 1;
    }
    sampler.abort();
    let peak = peak.load(Ordering::Relaxed);
    let hwm = server.vm_kib("VmHWM");
    let rise_mib = peak.saturating_sub(before) / 1024;
    eprintln!(
        "login flood of {FLOOD} x {BODY} bytes: answers {codes:?}; VmRSS {} MiB before, peak {} \
         MiB (+{rise_mib} MiB), VmHWM {} MiB",
        before / 1024,
        peak / 1024,
        hwm / 1024
    );
    assert_eq!(
        codes.get(&Some(413)),
        Some(&FLOOD),
        "every oversized login gets 413: {codes:?}"
    );
    assert!(
        rise_mib < RSS_BUDGET_MIB,
        "the flood raised RSS by {rise_mib} MiB (budget {RSS_BUDGET_MIB} MiB)"
    );

    // No cleartext HTTP/2: a prior-knowledge preface gets no HTTP/2 SETTINGS back.
    let mut h2c = TcpStream::connect(server.http).await.expect("connect");
    h2c.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0")
        .await
        .expect("write");
    let mut buf = [0u8; 64];
    let n = tokio::time::timeout(Duration::from_secs(10), h2c.read(&mut buf))
        .await
        .expect("an answer or a close within 10 s")
        .unwrap_or(0);
    assert!(
        n == 0 || buf.starts_with(b"HTTP/1.1 "),
        "h2c is not served: {:?}",
        &buf[..n]
    );
}

#[tokio::test]
async fn a_slow_body_gets_408_and_an_idle_keep_alive_connection_is_closed() {
    let redis = TestRedis::start().await;
    let viewer = Who::new("viewer", &[(&["*"], &["viewer"])]);
    let dir = tempfile::tempdir().expect("tempdir");
    let auth_file = dir.path().join("auth.yaml");
    write_atomically(&auth_file, &auth_yaml(&[&viewer]));
    let auth_arg = auth_file.to_str().expect("utf-8 path");
    let server = Server::start(
        1024,
        &redis.url,
        &[
            "--ui",
            "--auth-file",
            auth_arg,
            "--http-request-timeout",
            "1s",
            "--http-header-read-timeout",
            "1s",
        ],
    )
    .await;

    // A Content-Length past the limit gets 413 at once, naming the flag (a chunked body past it
    // gets the same answer from the read; the flood above sends both).
    let mut big = TcpStream::connect(server.http).await.expect("connect");
    let head = format!(
        "POST /ui/login HTTP/1.1\r\nHost: {}\r\nContent-Length: 1000000\r\nConnection: close\r\n\r\n",
        server.http
    );
    big.write_all(head.as_bytes()).await.expect("write");
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), big.read_to_end(&mut answer)).await;
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(answer.contains("--http-max-body-bytes"), "{answer}");

    let mut slow = TcpStream::connect(server.http).await.expect("connect");
    slow.write_all(
        format!(
            "POST /ui/login HTTP/1.1\r\nHost: {}\r\nContent-Length: 100\r\n\r\ntoken=",
            server.http
        )
        .as_bytes(),
    )
    .await
    .expect("write");
    let t = std::time::Instant::now();
    assert_eq!(
        status(&mut slow, Duration::from_secs(10)).await,
        Some(408),
        "a body that stops coming gets 408"
    );
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());

    let mut idle = TcpStream::connect(server.http).await.expect("connect");
    idle.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .expect("write");
    assert_eq!(status(&mut idle, Duration::from_secs(10)).await, Some(200));
    let took = closed_by_server(&mut idle, Duration::from_secs(20))
        .await
        .expect("an idle keep-alive connection is closed");
    assert!(took < Duration::from_secs(5), "closed after {took:?}");
}
