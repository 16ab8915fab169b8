//! `serve` flags of the abuse limits: HTTP/2 settings of the gRPC port (concurrent streams,
//! reset floods), worker streams per connection and per principal, connection age, and the
//! protection of `/metrics` on the HTTP port.
//!
//! Idle streams are bounded by `--heartbeat-timeout` and request sizes by
//! `--max-payload-bytes` (both in [`super::ServeArgs`]).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

/// Default of `--max-concurrent-streams`: HTTP/2 streams one connection may have open at once.
pub const DEFAULT_MAX_CONCURRENT_STREAMS: u32 = 100;
/// Default of `--max-streams-per-connection`: Subscribe streams on one connection.
pub const DEFAULT_MAX_STREAMS_PER_CONNECTION: u32 = 100;
/// Default of `--max-streams-per-principal`: Subscribe streams of one authenticated principal
/// on this replica.
pub const DEFAULT_MAX_STREAMS_PER_PRINCIPAL: u32 = 1000;
/// Default of `--http2-max-pending-reset-streams` (h2's own default).
pub const DEFAULT_MAX_PENDING_RESET_STREAMS: usize = 20;
/// Default of `--http2-max-local-error-reset-streams` (hyper's own default).
pub const DEFAULT_MAX_LOCAL_ERROR_RESET_STREAMS: usize = 1024;
/// Default of `--max-connection-age-grace`.
pub const DEFAULT_MAX_CONNECTION_AGE_GRACE: Duration = Duration::from_secs(300);

/// Abuse limits of the gRPC port and the protection of the HTTP port's `/metrics`.
#[derive(Clone, Debug, Args)]
pub struct AbuseArgs {
    /// HTTP/2 streams one gRPC connection may have open at once (SETTINGS_MAX_CONCURRENT_STREAMS,
    /// 1..=100000). Clients queue calls past it; a stream opened anyway is refused
    /// (REFUSED_STREAM). Each stream costs a task, up to a message of buffered request bytes
    /// (bounded by --max-buffered-request-bytes-per-connection) and header memory. 100 is the
    /// least RFC 9113 recommends advertising (Apache httpd's default; nginx uses 128): a
    /// client multiplexes 100 calls per connection and queues or opens a connection past it.
    #[arg(long, env = "JOBWIRE_MAX_CONCURRENT_STREAMS", default_value_t = DEFAULT_MAX_CONCURRENT_STREAMS)]
    pub max_concurrent_streams: u32,

    /// Subscribe (worker) streams open at once on one gRPC connection (1..=
    /// --max-concurrent-streams). The next Subscribe gets RESOURCE_EXHAUSTED naming this flag.
    #[arg(long, env = "JOBWIRE_MAX_STREAMS_PER_CONNECTION", default_value_t = DEFAULT_MAX_STREAMS_PER_CONNECTION)]
    pub max_streams_per_connection: u32,

    /// Subscribe (worker) streams open at once for one authenticated principal on this replica
    /// (1..=1000000). Applies only to authenticated callers (--auth-file): without auth every
    /// caller is the same anonymous principal, and the per-connection limit is the bound.
    #[arg(long, env = "JOBWIRE_MAX_STREAMS_PER_PRINCIPAL", default_value_t = DEFAULT_MAX_STREAMS_PER_PRINCIPAL)]
    pub max_streams_per_principal: u32,

    /// Streams a client may open and reset before the server accepts them, per connection
    /// (1..=10000); past it the connection is closed with GOAWAY ENHANCE_YOUR_CALM. The
    /// HTTP/2 "rapid reset" flood protection (CVE-2023-44487).
    #[arg(long, env = "JOBWIRE_HTTP2_MAX_PENDING_RESET_STREAMS", default_value_t = DEFAULT_MAX_PENDING_RESET_STREAMS)]
    pub http2_max_pending_reset_streams: usize,

    /// Streams the server may reset because of the client's protocol errors, per connection
    /// (1..=1000000); past it the connection is closed with GOAWAY ENHANCE_YOUR_CALM. The
    /// HTTP/2 "MadeYouReset" protection (CVE-2025-8671).
    #[arg(long, env = "JOBWIRE_HTTP2_MAX_LOCAL_ERROR_RESET_STREAMS", default_value_t = DEFAULT_MAX_LOCAL_ERROR_RESET_STREAMS)]
    pub http2_max_local_error_reset_streams: usize,

    /// Age after which a gRPC connection is sent GOAWAY (no new calls; clients reconnect) and
    /// its Subscribe streams `Draining`; 0s: no limit (the default, as in gRPC). At least 1s.
    #[arg(long, env = "JOBWIRE_MAX_CONNECTION_AGE", default_value = "0s", value_parser = humantime::parse_duration)]
    pub max_connection_age: Duration,

    /// How long the Subscribe streams of a connection past --max-connection-age may go on
    /// after their `Draining` (0s..=24h): then the leases they still hold go back to waiting
    /// (no attempt used) and the stream ends with UNAVAILABLE.
    #[arg(long, env = "JOBWIRE_MAX_CONNECTION_AGE_GRACE", default_value = "5m", value_parser = humantime::parse_duration)]
    pub max_connection_age_grace: Duration,

    /// File holding the bearer token /metrics requires (`Authorization: Bearer <token>`);
    /// reloaded when it changes or on SIGHUP. Without it /metrics is open.
    #[arg(long, env = "JOBWIRE_METRICS_TOKEN_FILE")]
    pub metrics_token_file: Option<PathBuf>,

    /// Serve /metrics on this address instead of --http-addr (which then serves only
    /// /healthz and /readyz).
    #[arg(long, env = "JOBWIRE_METRICS_ADDR")]
    pub metrics_addr: Option<SocketAddr>,
}

impl Default for AbuseArgs {
    /// The same values as the flags' defaults.
    fn default() -> Self {
        Self {
            max_concurrent_streams: DEFAULT_MAX_CONCURRENT_STREAMS,
            max_streams_per_connection: DEFAULT_MAX_STREAMS_PER_CONNECTION,
            max_streams_per_principal: DEFAULT_MAX_STREAMS_PER_PRINCIPAL,
            http2_max_pending_reset_streams: DEFAULT_MAX_PENDING_RESET_STREAMS,
            http2_max_local_error_reset_streams: DEFAULT_MAX_LOCAL_ERROR_RESET_STREAMS,
            max_connection_age: Duration::ZERO,
            max_connection_age_grace: DEFAULT_MAX_CONNECTION_AGE_GRACE,
            metrics_token_file: None,
            metrics_addr: None,
        }
    }
}

impl AbuseArgs {
    /// Checks what clap cannot; the error names the flag.
    pub fn validate(&self) -> Result<(), String> {
        let range = |flag: &str, v: u64, lo: u64, hi: u64| {
            if (lo..=hi).contains(&v) {
                Ok(())
            } else {
                Err(format!("--{flag} must be between {lo} and {hi}, got {v}"))
            }
        };
        range(
            "max-concurrent-streams",
            self.max_concurrent_streams.into(),
            1,
            100_000,
        )?;
        range(
            "max-streams-per-connection",
            self.max_streams_per_connection.into(),
            1,
            self.max_concurrent_streams.into(),
        )
        .map_err(|e| format!("{e} (at most --max-concurrent-streams)"))?;
        range(
            "max-streams-per-principal",
            self.max_streams_per_principal.into(),
            1,
            1_000_000,
        )?;
        range(
            "http2-max-pending-reset-streams",
            self.http2_max_pending_reset_streams as u64,
            1,
            10_000,
        )?;
        range(
            "http2-max-local-error-reset-streams",
            self.http2_max_local_error_reset_streams as u64,
            1,
            1_000_000,
        )?;
        let age = self.max_connection_age;
        if !age.is_zero() && age < Duration::from_secs(1) {
            return Err(format!(
                "--max-connection-age must be 0s (no limit) or at least 1s, got {}",
                humantime::format_duration(age)
            ));
        }
        if self.max_connection_age_grace > Duration::from_secs(24 * 3600) {
            return Err(format!(
                "--max-connection-age-grace must be between 0s and 24h, got {}",
                humantime::format_duration(self.max_connection_age_grace)
            ));
        }
        Ok(())
    }

    /// The connection age limit, `None` when off.
    pub fn connection_age(&self) -> Option<Duration> {
        (!self.max_connection_age.is_zero()).then_some(self.max_connection_age)
    }

    /// `JOBWIRE_*=value` lines for `--print-config`. The token file's path is shown, never
    /// its content.
    pub fn effective(&self) -> Vec<(&'static str, String)> {
        let d = |d: Duration| humantime::format_duration(d).to_string();
        vec![
            (
                "JOBWIRE_MAX_CONCURRENT_STREAMS",
                self.max_concurrent_streams.to_string(),
            ),
            (
                "JOBWIRE_MAX_STREAMS_PER_CONNECTION",
                self.max_streams_per_connection.to_string(),
            ),
            (
                "JOBWIRE_MAX_STREAMS_PER_PRINCIPAL",
                self.max_streams_per_principal.to_string(),
            ),
            (
                "JOBWIRE_HTTP2_MAX_PENDING_RESET_STREAMS",
                self.http2_max_pending_reset_streams.to_string(),
            ),
            (
                "JOBWIRE_HTTP2_MAX_LOCAL_ERROR_RESET_STREAMS",
                self.http2_max_local_error_reset_streams.to_string(),
            ),
            ("JOBWIRE_MAX_CONNECTION_AGE", d(self.max_connection_age)),
            (
                "JOBWIRE_MAX_CONNECTION_AGE_GRACE",
                d(self.max_connection_age_grace),
            ),
            (
                "JOBWIRE_METRICS_TOKEN_FILE",
                self.metrics_token_file
                    .as_ref()
                    .map(|p| p.display().to_string())
                    .unwrap_or_default(),
            ),
            (
                "JOBWIRE_METRICS_ADDR",
                self.metrics_addr.map(|a| a.to_string()).unwrap_or_default(),
            ),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn serve(args: &[&str]) -> AbuseArgs {
        crate::config::tests::serve(args).expect("parse").abuse
    }

    #[test]
    fn the_flag_defaults_equal_default_and_are_valid() {
        let a = serve(&[]);
        let d = AbuseArgs::default();
        assert_eq!(a.effective(), d.effective());
        a.validate().expect("defaults valid");
        assert_eq!(a.connection_age(), None, "no age limit by default");
    }

    #[test]
    fn each_flag_parses_and_shows_in_print_config() {
        let a = serve(&[
            "--max-concurrent-streams",
            "64",
            "--max-streams-per-connection",
            "8",
            "--max-streams-per-principal",
            "16",
            "--http2-max-pending-reset-streams",
            "5",
            "--http2-max-local-error-reset-streams",
            "50",
            "--max-connection-age",
            "30m",
            "--max-connection-age-grace",
            "10s",
            "--metrics-token-file",
            "/run/secrets/metrics",
            "--metrics-addr",
            "127.0.0.1:9464",
        ]);
        a.validate().expect("valid");
        assert_eq!(a.connection_age(), Some(Duration::from_secs(1800)));
        let lines: Vec<String> = a
            .effective()
            .into_iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        for want in [
            "JOBWIRE_MAX_CONCURRENT_STREAMS=64",
            "JOBWIRE_MAX_STREAMS_PER_CONNECTION=8",
            "JOBWIRE_MAX_STREAMS_PER_PRINCIPAL=16",
            "JOBWIRE_HTTP2_MAX_PENDING_RESET_STREAMS=5",
            "JOBWIRE_HTTP2_MAX_LOCAL_ERROR_RESET_STREAMS=50",
            "JOBWIRE_MAX_CONNECTION_AGE=30m",
            "JOBWIRE_MAX_CONNECTION_AGE_GRACE=10s",
            "JOBWIRE_METRICS_TOKEN_FILE=/run/secrets/metrics",
            "JOBWIRE_METRICS_ADDR=127.0.0.1:9464",
        ] {
            assert!(lines.iter().any(|l| l == want), "{want} in {lines:?}");
        }
    }

    #[test]
    fn out_of_range_values_name_their_flag() {
        let cases: [(&[&str], &str); 7] = [
            (
                &["--max-concurrent-streams", "0"],
                "--max-concurrent-streams",
            ),
            (
                &["--max-streams-per-connection", "2000"],
                "--max-streams-per-connection",
            ),
            (
                &["--max-streams-per-principal", "0"],
                "--max-streams-per-principal",
            ),
            (
                &["--http2-max-pending-reset-streams", "0"],
                "--http2-max-pending-reset-streams",
            ),
            (
                &["--http2-max-local-error-reset-streams", "0"],
                "--http2-max-local-error-reset-streams",
            ),
            (&["--max-connection-age", "500ms"], "--max-connection-age"),
            (
                &["--max-connection-age-grace", "2days"],
                "--max-connection-age-grace",
            ),
        ];
        for (args, flag) in cases {
            let e = serve(args).validate().expect_err(flag);
            assert!(e.starts_with(flag), "{e}");
        }
    }
}
