//! Building the channel: target parsing, TLS, keepalive, the bearer-token interceptor.

use std::time::Duration;

use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::interceptor::InterceptedService;
use tonic::service::Interceptor;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

use super::ClientOptions;
use crate::Error;

/// The client's connection: one HTTP/2 channel with the token added to every call.
pub type Conn = InterceptedService<Channel, Token>;

/// Adds `authorization: Bearer <token>` to every call when a token is set.
#[derive(Clone, Debug)]
pub struct Token(Option<MetadataValue<Ascii>>);

impl Interceptor for Token {
    fn call(&mut self, mut req: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(v) = &self.0 {
            req.metadata_mut().insert("authorization", v.clone());
        }
        Ok(req)
    }
}

/// Connects one channel to `target`. Keepalive (`o.keepalive`, by default a PING after 10 s
/// of silence, also while idle, the connection dropped when one goes unanswered for 5 s), so
/// a dead peer (a network cut without FIN/RST, a frozen server) breaks the worker's stream
/// instead of hanging it. The wide flow-control windows let many leases and acks be in
/// flight on one stream.
pub async fn connect(target: &str, o: &ClientOptions) -> Result<Conn, Error> {
    let k = o.keepalive;
    if k.interval < Duration::from_secs(1) || k.timeout < Duration::from_secs(1) {
        return Err(Error::InvalidArgument(format!(
            "keepalive interval and timeout must be at least 1s, got {:?} and {:?}",
            k.interval, k.timeout
        )));
    }
    let tls = match &o.tls {
        None => None,
        Some(t) => {
            let mut c = ClientTlsConfig::new();
            match &t.ca_pem {
                Some(ca) => c = c.ca_certificate(Certificate::from_pem(ca)),
                None => c = c.with_native_roots(),
            }
            match (&t.cert_pem, &t.key_pem) {
                (Some(cert), Some(key)) => c = c.identity(Identity::from_pem(cert, key)),
                (None, None) => {}
                _ => {
                    return Err(Error::InvalidArgument(
                        "tls: cert_pem and key_pem go together".into(),
                    ))
                }
            }
            if let Some(name) = &t.server_name {
                c = c.domain_name(name.clone());
            }
            Some(c)
        }
    };
    let uri = match (target.split_once("://"), tls.is_some()) {
        (None, false) => format!("http://{target}"),
        (None, true) => format!("https://{target}"),
        (Some(("http", rest)), true) => format!("https://{rest}"),
        (Some(("https", _)), false) => {
            return Err(Error::InvalidArgument(
                "an https:// target needs ClientOptions::tls (use TlsOptions::default() for the system's roots)".into(),
            ))
        }
        (Some(_), _) => target.to_owned(),
    };
    let token = match &o.token {
        None => None,
        Some(t) => Some(
            MetadataValue::try_from(format!("Bearer {t}"))
                .map_err(|_| Error::InvalidArgument("the token must be printable ASCII".into()))?,
        ),
    };
    let connect_err = |source| Error::Connect {
        target: target.to_owned(),
        source,
    };
    let mut endpoint = Endpoint::from_shared(uri)
        .map_err(connect_err)?
        .tcp_nodelay(true)
        .http2_keep_alive_interval(k.interval)
        .keep_alive_timeout(k.timeout)
        .keep_alive_while_idle(k.without_calls)
        .initial_stream_window_size(Some(4 << 20))
        .initial_connection_window_size(Some(16 << 20))
        .connect_timeout(o.connect_timeout.unwrap_or(Duration::from_secs(5)));
    if let Some(tls) = tls {
        endpoint = endpoint.tls_config(tls).map_err(connect_err)?;
    }
    let channel = endpoint.connect().await.map_err(connect_err)?;
    Ok(InterceptedService::new(channel, Token(token)))
}
