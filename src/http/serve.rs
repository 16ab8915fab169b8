//! The HTTP port's server: an accept loop under the port's connection caps, hyper's HTTP/1
//! server with a timer (so its header-read timeout runs: axum's `serve` has none), a body
//! limit and a body-read deadline on every route, and a stall limit on writes.
//!
//! HTTP/1.1 only: probes, Prometheus and browsers (which speak HTTP/2 only over TLS) need
//! nothing else, and a cleartext HTTP/2 (h2c) connection would multiplex many bodies at once
//! onto one socket. An h2c preface is refused like any malformed request.
//!
//! Deadlines of a connection ([`HttpLimits`]):
//! - headers: from accept, or from the end of the previous response (the keep-alive idle
//!   time), the next request's headers must arrive within `header_read_timeout` (hyper);
//! - body: `request_timeout` after the headers the whole body must be in (408), and a body
//!   over `max_body_bytes` gets 413 without being read further (tower-http); the handler then
//!   gets it whole. The handler itself is not cut off: a dashboard purge or replay runs its
//!   batches to the end and writes its audit line (each Redis call has `--redis-timeout`);
//! - writes: a response the client does not read for `request_timeout` ends the connection.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{ConnectInfo, Request};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Router;
use http_body_util::{BodyExt, LengthLimitError};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio::time::Sleep;
use tokio_util::sync::CancellationToken;
use tower_http::limit::RequestBodyLimitLayer;

use crate::config::ConnArgs;
use crate::transport::{ConnCaps, Port};

/// Pause after an accept error (e.g. out of file descriptors) before accepting again.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(50);

/// The limits of one HTTP listener (from the `--http-*` flags and `--max-connections-per-ip`).
#[derive(Clone, Debug)]
pub struct HttpLimits {
    /// Longest wait for a request's headers, from accept or the previous response.
    pub header_read_timeout: Duration,
    /// Longest time from the headers to the end of the body, and longest write stall.
    pub request_timeout: Duration,
    /// Largest request body, bytes.
    pub max_body_bytes: usize,
    /// Connections open at once on the listener.
    pub max_connections: u32,
    /// Connections open at once from one peer IP address.
    pub max_connections_per_ip: u32,
}

impl HttpLimits {
    /// The limits `args` configure.
    pub fn from_args(args: &ConnArgs) -> Self {
        Self {
            header_read_timeout: args.http_header_read_timeout,
            request_timeout: args.http_request_timeout,
            max_body_bytes: args.http_max_body_bytes,
            max_connections: args.http_max_connections,
            max_connections_per_ip: args.max_connections_per_ip,
        }
    }
}

impl Default for HttpLimits {
    /// The flags' defaults.
    fn default() -> Self {
        Self::from_args(&ConnArgs::default())
    }
}

/// Serves `routes` on `listener` (the `port` label of its metrics) under `limits` until
/// `shutdown` is cancelled; then stops accepting, closes idle connections and waits for the
/// open requests (the caller bounds that wait with the shutdown grace).
pub async fn serve_with_limits(
    listener: TcpListener,
    routes: Router,
    limits: &HttpLimits,
    port: Port,
    shutdown: CancellationToken,
) -> io::Result<()> {
    let body_deadline = limits.request_timeout;
    // Layers run outside in: the limit (413 on a too long Content-Length at once) wraps the
    // deadline, which reads the limited body.
    let routes = routes
        .layer(axum::middleware::from_fn(move |req, next| {
            read_body_within(body_deadline, req, next)
        }))
        .layer(RequestBodyLimitLayer::new(limits.max_body_bytes))
        // tower-http answers a too long Content-Length with its own text: say which flag.
        .layer(axum::middleware::map_response(name_the_body_limit));
    let caps = ConnCaps::new(
        port,
        limits.max_connections.into(),
        limits.max_connections_per_ip,
    );
    let mut http1 = hyper::server::conn::http1::Builder::new();
    http1
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .keep_alive(true);
    let graceful = GracefulShutdown::new();
    loop {
        let room = tokio::select! {
            _ = shutdown.cancelled() => break,
            p = caps.room() => p,
        };
        let (tcp, remote) = tokio::select! {
            _ = shutdown.cancelled() => break,
            r = listener.accept() => match r {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!(error = %e, port = port.label(), "http accept failed");
                    tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
                    continue;
                }
            },
        };
        let Some(slot) = caps.admit(room, remote.ip()) else {
            continue;
        };
        let _ = tcp.set_nodelay(true);
        let io = TokioIo::new(WriteStall::new(tcp, limits.request_timeout));
        // The peer's address in each request (`ConnectInfo`): the dashboard's login rate limit.
        let service = tower::ServiceBuilder::new()
            .layer(axum::Extension(ConnectInfo(remote)))
            .service(routes.clone());
        let conn = http1.serve_connection(io, TowerToHyperService::new(service));
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            let _slot = slot;
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, remote = %remote, "http connection ended");
            }
        });
    }
    drop(listener);
    graceful.shutdown().await;
    Ok(())
}

/// A 413 (only the body limit answers it) with the text that names `--http-max-body-bytes`.
async fn name_the_body_limit(res: Response) -> Response {
    if res.status() == StatusCode::PAYLOAD_TOO_LARGE {
        return too_large();
    }
    res
}

fn too_large() -> Response {
    (
        StatusCode::PAYLOAD_TOO_LARGE,
        "the request body is larger than --http-max-body-bytes",
    )
        .into_response()
}

/// Reads the request's whole body within `deadline` (408 past it; 413 past the body limit
/// the layer outside set) and hands the request on with the body in memory.
async fn read_body_within(deadline: Duration, req: Request, next: Next) -> Response {
    let (parts, body) = req.into_parts();
    match tokio::time::timeout(deadline, body.collect()).await {
        Ok(Ok(collected)) => {
            next.run(Request::from_parts(parts, Body::from(collected.to_bytes())))
                .await
        }
        Ok(Err(e)) => {
            let e = e.into_inner();
            if e.downcast_ref::<LengthLimitError>().is_some() {
                too_large()
            } else {
                (
                    StatusCode::BAD_REQUEST,
                    "the request body could not be read",
                )
                    .into_response()
            }
        }
        Err(_) => (
            StatusCode::REQUEST_TIMEOUT,
            "the request body did not arrive within --http-request-timeout",
        )
            .into_response(),
    }
}

/// A connection whose writes may not stall longer than a limit: a pending write (or flush)
/// that makes no progress for that long fails with `TimedOut`, which ends the connection.
struct WriteStall<T> {
    io: T,
    limit: Duration,
    stalled: Option<Pin<Box<Sleep>>>,
}

impl<T> WriteStall<T> {
    fn new(io: T, limit: Duration) -> Self {
        Self {
            io,
            limit,
            stalled: None,
        }
    }

    /// Passes `r` on, timing a `Pending` from its first occurrence.
    fn watch<R>(&mut self, cx: &mut Context<'_>, r: Poll<io::Result<R>>) -> Poll<io::Result<R>> {
        match r {
            Poll::Pending => {
                let limit = self.limit;
                let sleep = self
                    .stalled
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
                match sleep.as_mut().poll(cx) {
                    Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "the client read nothing within --http-request-timeout",
                    ))),
                    Poll::Pending => Poll::Pending,
                }
            }
            ready => {
                self.stalled = None;
                ready
            }
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for WriteStall<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for WriteStall<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.io).poll_write(cx, buf);
        this.watch(cx, r)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.io).poll_write_vectored(cx, bufs);
        this.watch(cx, r)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.io).poll_flush(cx);
        this.watch(cx, r)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.io).poll_shutdown(cx);
        this.watch(cx, r)
    }
}
