//! A tower layer that counts gRPC calls by service, method and status code, with the names
//! of go-grpc-prometheus (`grpc_server_handled_total`, `grpc_server_handling_seconds`). The
//! status is read from the response headers (a "trailers-only" error response), else from
//! the trailers when the body ends; a body dropped before its trailers counts as Canceled.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{OnceLock, RwLock};
use std::task::{Context, Poll};
use std::time::Instant;

use futures::future::BoxFuture;
use http_body::{Body, Frame, SizeHint};
use metrics::{counter, histogram};
use tower::{Layer, Service};

use super::{GRPC_HANDLED, GRPC_HANDLING_SECONDS};

/// Adds gRPC request metrics to every service of the server.
#[derive(Clone, Copy, Debug, Default)]
pub struct GrpcMetricsLayer;

impl<S> Layer<S> for GrpcMetricsLayer {
    type Service = GrpcMetrics<S>;

    fn layer(&self, inner: S) -> GrpcMetrics<S> {
        GrpcMetrics { inner }
    }
}

/// The service [`GrpcMetricsLayer`] wraps around the router.
#[derive(Clone, Debug)]
pub struct GrpcMetrics<S> {
    inner: S,
}

/// go-grpc-prometheus's name of a gRPC status code.
fn code_name(code: &str) -> &'static str {
    match code {
        "0" => "OK",
        "1" => "Canceled",
        "2" => "Unknown",
        "3" => "InvalidArgument",
        "4" => "DeadlineExceeded",
        "5" => "NotFound",
        "6" => "AlreadyExists",
        "7" => "PermissionDenied",
        "8" => "ResourceExhausted",
        "9" => "FailedPrecondition",
        "10" => "Aborted",
        "11" => "OutOfRange",
        "12" => "Unimplemented",
        "13" => "Internal",
        "14" => "Unavailable",
        "15" => "DataLoss",
        "16" => "Unauthenticated",
        _ => "Unknown",
    }
}

/// `/jobwire.v1.JobService/Enqueue` -> (`jobwire.v1.JobService`, `Enqueue`).
fn split_path(path: &str) -> (String, String) {
    let mut parts = path.trim_start_matches('/').splitn(2, '/');
    let service = parts.next().unwrap_or_default().to_owned();
    let method = parts.next().unwrap_or_default().to_owned();
    (service, method)
}

/// Most distinct request paths given labels of their own; later ones count as `unknown`
/// (clients can send any path, and each label set is kept for the life of the process).
const MAX_PATHS: usize = 256;

/// (service, method) labels of a request path, interned once per path so that a call
/// allocates no label strings.
type Labels = (&'static str, &'static str);

fn labels_for(path: &str) -> Labels {
    static PATHS: OnceLock<RwLock<HashMap<Box<str>, Labels>>> = OnceLock::new();
    let paths = PATHS.get_or_init(RwLock::default);
    if let Some(l) = paths.read().ok().and_then(|p| p.get(path).copied()) {
        return l;
    }
    let Ok(mut p) = paths.write() else {
        return ("unknown", "unknown");
    };
    if let Some(l) = p.get(path) {
        return *l;
    }
    if p.len() >= MAX_PATHS {
        return ("unknown", "unknown");
    }
    let (service, method) = split_path(path);
    let l: Labels = (service.leak(), method.leak());
    p.insert(path.into(), l);
    l
}

fn record(labels: Labels, code: &'static str) {
    counter!(GRPC_HANDLED, "grpc_service" => labels.0, "grpc_method" => labels.1, "grpc_code" => code)
        .increment(1);
}

impl<S, ReqBody, ResBody> Service<http::Request<ReqBody>> for GrpcMetrics<S>
where
    S: Service<http::Request<ReqBody>, Response = http::Response<ResBody>> + Send,
    S::Future: Send + 'static,
    ResBody: Body + Send + 'static,
{
    type Response = http::Response<CountedBody<ResBody>>;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<ReqBody>) -> Self::Future {
        let labels = labels_for(req.uri().path());
        let start = Instant::now();
        let fut = self.inner.call(req);
        Box::pin(async move {
            let resp = fut.await?;
            histogram!(GRPC_HANDLING_SECONDS, "grpc_service" => labels.0, "grpc_method" => labels.1)
                .record(start.elapsed().as_secs_f64());
            let header_code = resp
                .headers()
                .get("grpc-status")
                .and_then(|v| v.to_str().ok())
                .map(code_name);
            let pending = match header_code {
                Some(code) => {
                    record(labels, code);
                    None
                }
                None => Some(labels),
            };
            let (parts, body) = resp.into_parts();
            Ok(http::Response::from_parts(
                parts,
                CountedBody {
                    inner: Box::pin(body),
                    pending,
                },
            ))
        })
    }
}

/// A response body that records the call's status when its trailers pass by.
pub struct CountedBody<B> {
    inner: Pin<Box<B>>,
    /// Labels of a call whose status is not recorded yet.
    pending: Option<Labels>,
}

impl<B: Body> Body for CountedBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let polled = self.inner.as_mut().poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(trailers) = frame.trailers_ref() {
                    let code = trailers
                        .get("grpc-status")
                        .and_then(|v| v.to_str().ok())
                        .map_or("Unknown", code_name);
                    if let Some(labels) = self.pending.take() {
                        record(labels, code);
                    }
                }
            }
            Poll::Ready(None) => {
                if let Some(labels) = self.pending.take() {
                    record(labels, "Unknown");
                }
            }
            _ => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl<B> Drop for CountedBody<B> {
    fn drop(&mut self) {
        if let Some(labels) = self.pending.take() {
            record(labels, "Canceled");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_and_codes_map_to_go_grpc_prometheus_labels() {
        assert_eq!(
            split_path("/jobwire.v1.JobService/Enqueue"),
            ("jobwire.v1.JobService".to_owned(), "Enqueue".to_owned())
        );
        assert_eq!(
            labels_for("/jobwire.v1.JobService/Enqueue"),
            ("jobwire.v1.JobService", "Enqueue")
        );
        assert_eq!(code_name("0"), "OK");
        assert_eq!(code_name("9"), "FailedPrecondition");
        assert_eq!(code_name("99"), "Unknown");
    }
}
