//! The plain HTTP port: `/healthz` (liveness), `/readyz` (readiness) and `/metrics` (Prometheus).
//!
//! Liveness answers 200 for as long as the process serves HTTP, so a slow Redis never gets the pod
//! restarted; readiness follows [`HttpState::ready`], which the server sets while a write to Redis
//! works (and its `maxmemory-policy` does not evict) and clears when it does not or the server
//! starts draining, so traffic moves elsewhere. `/metrics` renders through
//! a callback so this module does not depend on the metrics exporter.
//!
//! `/healthz` and `/readyz` stay open and answer a fixed word (no version, no Redis address, no
//! error text): whoever reaches the port learns only up or down. `/metrics` may require a
//! bearer token ([`MetricsToken`], `--metrics-token-file`: 401 with `WWW-Authenticate: Bearer`
//! without it) and may be served on its own listener (`--metrics-addr`, [`metrics_router`]),
//! which then leaves [`health_router`] alone on the main port.
//!
//! Both listeners serve HTTP/1.1 under deadlines, a body limit and connection caps
//! ([`HttpLimits`], [`serve_with_limits`]).

mod host;
mod serve;
mod token;

pub use host::{host_checked, AllowedHosts, ANY_HOST};
pub use serve::{serve_with_limits, HttpLimits};
pub use token::MetricsToken;

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use tokio_util::sync::CancellationToken;

/// Content type of the Prometheus text exposition format.
pub const METRICS_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Renders the current metrics in the Prometheus text format (async: it may refresh the
/// queue gauges from Redis first).
pub type MetricsRender = Arc<dyn Fn() -> futures::future::BoxFuture<'static, String> + Send + Sync>;

/// Shared state of the HTTP handlers; cheap to clone.
#[derive(Clone, Default)]
pub struct HttpState {
    /// True while the server can do work (Redis takes writes and it is not draining).
    pub ready: Arc<AtomicBool>,
    /// Metrics renderer; `/metrics` is 404 while this is `None`.
    pub metrics_render: Option<MetricsRender>,
    /// The token `/metrics` requires, if any.
    pub metrics_token: Option<Arc<MetricsToken>>,
}

impl HttpState {
    /// State sharing `ready` with the server, without metrics.
    pub fn new(ready: Arc<AtomicBool>) -> Self {
        Self {
            ready,
            metrics_render: None,
            metrics_token: None,
        }
    }

    /// Adds the `/metrics` renderer.
    pub fn with_metrics(mut self, render: MetricsRender) -> Self {
        self.metrics_render = Some(render);
        self
    }

    /// Requires `token` on `/metrics`.
    pub fn with_metrics_token(mut self, token: Option<Arc<MetricsToken>>) -> Self {
        self.metrics_token = token;
        self
    }
}

impl fmt::Debug for HttpState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpState")
            .field("ready", &self.ready.load(Ordering::Relaxed))
            .field("metrics_render", &self.metrics_render.is_some())
            .field(
                "metrics_token_file",
                &self.metrics_token.as_ref().map(|t| t.path().to_owned()),
            )
            .finish()
    }
}

/// All HTTP routes over `state`: [`health_router`] and [`metrics_router`].
pub fn router(state: HttpState) -> Router {
    health_router(state.clone()).merge(metrics_router(state))
}

/// `/healthz` and `/readyz` only.
pub fn health_router(state: HttpState) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(state)
}

/// `/metrics` only.
pub fn metrics_router(state: HttpState) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .with_state(state)
}

/// Serves [`router`] on `listener` under the default [`HttpLimits`] until `shutdown` is
/// cancelled, then lets open requests finish.
///
/// The drain after cancellation has no time limit of its own; the caller bounds it with the
/// shutdown grace, as it does for the gRPC server.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: HttpState,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let limits = HttpLimits::default();
    serve_with_limits(
        listener,
        router(state),
        &limits,
        crate::transport::Port::Http,
        shutdown,
    )
    .await
}

async fn healthz() -> &'static str {
    "ok"
}

async fn readyz(State(state): State<HttpState>) -> (StatusCode, &'static str) {
    if state.ready.load(Ordering::Acquire) {
        (StatusCode::OK, "ready")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready")
    }
}

async fn metrics(State(state): State<HttpState>, headers: HeaderMap) -> Response {
    if let Some(token) = &state.metrics_token {
        if !token.allows(headers.get(header::AUTHORIZATION)) {
            return (
                StatusCode::UNAUTHORIZED,
                [(header::WWW_AUTHENTICATE, "Bearer realm=\"jobwire metrics\"")],
                "a bearer token is required (--metrics-token-file)",
            )
                .into_response();
        }
    }
    match &state.metrics_render {
        Some(render) => (
            [(header::CONTENT_TYPE, METRICS_CONTENT_TYPE)],
            render().await,
        )
            .into_response(),
        None => (StatusCode::NOT_FOUND, "metrics disabled").into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::SocketAddr;
    use std::time::Duration;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// Sends one HTTP/1.1 GET and returns the whole response text.
    async fn get(addr: SocketAddr, path: &str) -> String {
        let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let req = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        s.write_all(req.as_bytes()).await.expect("write");
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).await.expect("read");
        String::from_utf8(buf).expect("utf8")
    }

    fn status_line(resp: &str) -> &str {
        resp.lines().next().unwrap_or_default()
    }

    #[tokio::test]
    async fn routes_answer_and_shutdown_stops_serving() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let ready = Arc::new(AtomicBool::new(false));
        let state = HttpState::new(ready.clone())
            .with_metrics(Arc::new(|| Box::pin(async { "jobwire_up 1\n".to_owned() })));
        let token = CancellationToken::new();
        let server = tokio::spawn(serve(listener, state, token.clone()));

        let r = get(addr, "/healthz").await;
        assert_eq!(status_line(&r), "HTTP/1.1 200 OK");
        assert!(r.ends_with("ok"), "{r}");

        assert_eq!(
            status_line(&get(addr, "/readyz").await),
            "HTTP/1.1 503 Service Unavailable"
        );
        ready.store(true, Ordering::Release);
        let r = get(addr, "/readyz").await;
        assert_eq!(status_line(&r), "HTTP/1.1 200 OK");
        assert!(r.ends_with("ready"), "{r}");

        let r = get(addr, "/metrics").await;
        assert_eq!(status_line(&r), "HTTP/1.1 200 OK");
        assert!(
            r.to_ascii_lowercase()
                .contains(&format!("content-type: {METRICS_CONTENT_TYPE}")),
            "{r}"
        );
        assert!(r.ends_with("jobwire_up 1\n"), "{r}");

        assert_eq!(
            status_line(&get(addr, "/nope").await),
            "HTTP/1.1 404 Not Found"
        );

        token.cancel();
        let done = tokio::time::timeout(Duration::from_secs(10), server)
            .await
            .expect("stops after cancel");
        done.expect("join").expect("serve ok");
    }

    #[tokio::test]
    async fn metrics_is_404_without_renderer() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let token = CancellationToken::new();
        let server = tokio::spawn(serve(listener, HttpState::default(), token.clone()));
        assert_eq!(
            status_line(&get(addr, "/metrics").await),
            "HTTP/1.1 404 Not Found"
        );
        token.cancel();
        let _ = tokio::time::timeout(Duration::from_secs(10), server)
            .await
            .expect("stops");
    }
}
