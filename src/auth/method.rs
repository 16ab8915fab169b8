//! The RPC a request calls, put into its extensions before the authentication interceptor
//! runs: tonic hands an interceptor the metadata and extensions but not the URI, and the
//! early refusal of [`super::AuthInterceptor`] needs to know what is called.
//!
//! [`Guarded`] wraps a service behind the interceptor: for a request that came over a
//! connection (a [`crate::transport::ConnInfo`] or tonic's `TcpConnectInfo` in its
//! extensions: its body is still to arrive), it reads the RPC from the request path
//! (`/jobwire.v1.JobService/Enqueue`), inserts it as an [`Rpc`] extension and calls the
//! intercepted service. A path that names no RPC of [`Rpc::ALL`] gets no extension, and the
//! handler's own check decides. The dashboard's in-process calls (`crate::ui`) carry neither
//! connection extension: their bodies are already in memory, so nothing is saved by refusing
//! them early, and the handler's refusal names the queue in the message and the audit line.

use std::task::{Context, Poll};

use tonic::server::NamedService;
use tonic::service::interceptor::InterceptedService;
use tower::Service;

use super::guard::AuthInterceptor;
use super::policy::Rpc;

/// The package of the jobwire services, as it prefixes their paths.
const PACKAGE: &str = "jobwire.v1.";

/// The RPC of a gRPC request path `/<package>.<Service>/<Method>`, for jobwire's services.
pub fn rpc_of_path(path: &str) -> Option<Rpc> {
    let (service, method) = path.strip_prefix('/')?.split_once('/')?;
    if !service.starts_with(PACKAGE) {
        return None;
    }
    Rpc::ALL.into_iter().find(|r| r.name() == method)
}

/// A service behind the authentication interceptor, told the RPC of each request (see the
/// module doc). Build it with [`super::Auth::guard`].
#[derive(Clone, Debug)]
pub struct Guarded<S> {
    inner: InterceptedService<S, AuthInterceptor>,
}

impl<S> Guarded<S> {
    pub(super) fn new(svc: S, interceptor: AuthInterceptor) -> Guarded<S> {
        Guarded {
            inner: InterceptedService::new(svc, interceptor),
        }
    }
}

impl<S: NamedService> NamedService for Guarded<S> {
    const NAME: &'static str = S::NAME;
}

impl<S, B> Service<http::Request<B>> for Guarded<S>
where
    InterceptedService<S, AuthInterceptor>: Service<http::Request<B>>,
{
    type Response = <InterceptedService<S, AuthInterceptor> as Service<http::Request<B>>>::Response;
    type Error = <InterceptedService<S, AuthInterceptor> as Service<http::Request<B>>>::Error;
    type Future = <InterceptedService<S, AuthInterceptor> as Service<http::Request<B>>>::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: http::Request<B>) -> Self::Future {
        let ext = req.extensions();
        let over_network = ext.get::<crate::transport::ConnInfo>().is_some()
            || ext
                .get::<tonic::transport::server::TcpConnectInfo>()
                .is_some();
        if over_network {
            if let Some(rpc) = rpc_of_path(req.uri().path()) {
                req.extensions_mut().insert(rpc);
            }
        }
        self.inner.call(req)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_rpc_is_found_by_its_path_and_nothing_else() {
        for (service, rpc) in [
            ("JobService", Rpc::Enqueue),
            ("WorkerService", Rpc::Subscribe),
            ("DeadLetterService", Rpc::ReplayDeadLetters),
            ("QueueService", Rpc::ListWorkers),
            ("GroupService", Rpc::PauseGroup),
        ] {
            let path = format!("/jobwire.v1.{service}/{}", rpc.name());
            assert_eq!(rpc_of_path(&path), Some(rpc), "{path}");
        }
        for rpc in Rpc::ALL {
            assert_eq!(
                rpc_of_path(&format!("/jobwire.v1.X/{}", rpc.name())),
                Some(rpc)
            );
        }
        for path in [
            "/grpc.health.v1.Health/Check",
            "/other.v1.JobService/Enqueue",
            "/jobwire.v1.JobService/Nope",
            "/jobwire.v1.JobService",
            "Enqueue",
            "",
        ] {
            assert_eq!(rpc_of_path(path), None, "{path}");
        }
    }
}
