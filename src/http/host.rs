//! The Host check of the HTTP port's browser-reachable routes (`/ui`, and `/metrics` without
//! `--metrics-token-file`): a defence against DNS rebinding.
//!
//! A page on `evil.example` whose name then re-resolves to 127.0.0.1 talks to the server as
//! its own origin: `Origin` and `Host` both say `evil.example`, so a same-origin check passes,
//! and without an auth file the dashboard gives it every right. What the page cannot choose
//! is a `Host` other than its own name, so a request is served only when its host is one the
//! server is known by: an IP literal (the browser's origin is then that address, never a
//! name that can re-resolve), `localhost` or a `*.localhost` name (RFC 6761: browsers
//! resolve them to loopback themselves and never ask DNS), or a name of
//! `--http-allowed-hosts` (the dashboard's name behind an Ingress or proxy). Anything else
//! gets 421 Misdirected Request naming the flag; the handler never runs, so nothing changes.
//!
//! The host is that of the request target's authority when it has one (HTTP/2
//! `:authority`, an absolute-form HTTP/1.1 target) and of the `Host` header, both checked
//! when both are there; the port is ignored. A request with neither is refused too.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Router;

/// The `--http-allowed-hosts` value that turns the check off.
pub const ANY_HOST: &str = "*";

/// The host names a browser-reachable route answers to, besides IP literals and
/// `localhost`; cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct AllowedHosts {
    /// Lower-case names without a trailing dot.
    names: Arc<[String]>,
    /// `--http-allowed-hosts '*'`: every host (no DNS-rebinding defence).
    any: bool,
}

impl AllowedHosts {
    /// IP literals, `localhost`, `*.localhost` and `names` (compared without case and
    /// trailing dot; [`ANY_HOST`] allows every host).
    pub fn new(names: &[String]) -> AllowedHosts {
        AllowedHosts {
            any: names.iter().any(|n| n == ANY_HOST),
            names: names
                .iter()
                .map(|n| normal(n))
                .filter(|n| !n.is_empty())
                .collect(),
        }
    }

    /// May a request whose host (port stripped) is `host` be served?
    pub fn allows(&self, host: &str) -> bool {
        if self.any {
            return true;
        }
        if host.starts_with('[') && host.ends_with(']') {
            return host[1..host.len() - 1]
                .parse::<std::net::Ipv6Addr>()
                .is_ok();
        }
        if host.parse::<std::net::Ipv4Addr>().is_ok() {
            return true;
        }
        let host = normal(host);
        host == "localhost" || host.ends_with(".localhost") || self.names.contains(&host)
    }
}

/// Lower case, no trailing dot (`Example.COM.` and `example.com` are one name).
fn normal(name: &str) -> String {
    name.trim_end_matches('.').to_ascii_lowercase()
}

/// The host of an authority (`host`, `host:port`, `[v6]:port`): the port stripped, an IPv6
/// literal kept in its brackets.
pub fn host_of(authority: &str) -> &str {
    if authority.starts_with('[') {
        return match authority.find(']') {
            Some(end) => &authority[..=end],
            None => authority,
        };
    }
    match authority.rsplit_once(':') {
        Some((host, port)) if port.bytes().all(|b| b.is_ascii_digit()) => host,
        _ => authority,
    }
}

/// The host a request names that `allowed` refuses, `Some("")` when it names none, `None`
/// when it may be served.
fn refused(allowed: &AllowedHosts, req: &Request) -> Option<String> {
    let from_uri = req.uri().authority().map(|a| a.as_str());
    let from_header = match req.headers().get(header::HOST).map(|h| h.to_str()) {
        Some(Ok(h)) => Some(h),
        Some(Err(_)) => return Some("(not ASCII)".into()),
        None => None,
    };
    if from_uri.is_none() && from_header.is_none() {
        return Some(String::new());
    }
    [from_uri, from_header]
        .into_iter()
        .flatten()
        .map(host_of)
        .find(|h| !allowed.allows(h))
        .map(str::to_owned)
}

/// The middleware: 421 Misdirected Request, naming the flag, for a host `allowed` refuses.
pub async fn check_host(State(allowed): State<AllowedHosts>, req: Request, next: Next) -> Response {
    match refused(&allowed, &req) {
        None => next.run(req).await,
        Some(host) => {
            tracing::debug!(host = %crate::telemetry::Untrusted(&host), path = %req.uri().path(), "request refused: host not allowed");
            let shown: String = host.chars().filter(|c| !c.is_control()).take(256).collect();
            let text = format!(
                "421 Misdirected Request: this server does not answer to the host {shown:?} on \
                 this path. It answers to IP addresses, localhost and the names of \
                 --http-allowed-hosts (env JOBWIRE_HTTP_ALLOWED_HOSTS, comma-separated): add \
                 the name you reach it by there (a guard against DNS rebinding)\n"
            );
            (StatusCode::MISDIRECTED_REQUEST, text).into_response()
        }
    }
}

/// `routes` with the Host check of `allowed` on every one of them.
pub fn host_checked(routes: Router, allowed: AllowedHosts) -> Router {
    routes.layer(axum::middleware::from_fn_with_state(allowed, check_host))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_stripped_and_ipv6_literals_kept() {
        assert_eq!(host_of("127.0.0.1:9090"), "127.0.0.1");
        assert_eq!(host_of("localhost"), "localhost");
        assert_eq!(host_of("[::1]:9090"), "[::1]");
        assert_eq!(host_of("[::1]"), "[::1]");
        assert_eq!(host_of("evil.example:80"), "evil.example");
        assert_eq!(host_of("a:b"), "a:b");
    }

    #[test]
    fn ip_literals_localhost_and_configured_names_only() {
        let none = AllowedHosts::new(&[]);
        for ok in [
            "127.0.0.1",
            "10.1.2.3",
            "[::1]",
            "localhost",
            "LocalHost.",
            "ui.localhost",
        ] {
            assert!(none.allows(ok), "{ok}");
        }
        for bad in [
            "evil.example",
            "127.0.0.1.nip.io",
            "localhost.evil.example",
            "::1",
            "[evil]",
            "",
            "0x7f.1",
        ] {
            assert!(!none.allows(bad), "{bad}");
        }
        let some = AllowedHosts::new(&["Jobs.Example.com".into()]);
        assert!(some.allows("jobs.example.com") && some.allows("JOBS.example.com."));
        assert!(!some.allows("x.jobs.example.com"));
        assert!(AllowedHosts::new(&[ANY_HOST.into()]).allows("evil.example"));
        assert!(!AllowedHosts::new(&[String::new()]).allows(""));
    }
}
