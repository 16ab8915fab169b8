//! `serve` flags of connection deadlines and caps: how long a connection may take to say
//! something useful (the gRPC port's HTTP/2 preface, the HTTP port's request headers and
//! bodies), how long a silent one is kept, how many connections each port holds in total and
//! per peer address, and the file descriptors kept back for reloads and Redis.
//!
//! The descriptor limit is only known at start (after `crate::transport::fds` raised it), so
//! the gRPC port's connection cap is resolved there ([`ConnArgs::grpc_connection_cap`]).

use std::time::Duration;

use clap::Args;

/// Default of `--grpc-preface-timeout`.
pub const DEFAULT_PREFACE_TIMEOUT: Duration = Duration::from_secs(10);
/// Default of `--grpc-keepalive-interval` (what the server has always used).
pub const DEFAULT_KEEPALIVE_INTERVAL: Duration = Duration::from_secs(20);
/// Default of `--grpc-keepalive-timeout` (what the server has always used).
pub const DEFAULT_KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(10);
/// Default of `--http-header-read-timeout`.
pub const DEFAULT_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Default of `--http-request-timeout`.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Default of `--http-max-body-bytes`: the dashboard's largest form (a dead-letter page's 50
/// selected job ids of up to 256 bytes each, percent-encoded, about 39 KiB) with room to spare.
pub const DEFAULT_MAX_BODY_BYTES: usize = 64 << 10;
/// Default of `--http-max-connections`.
pub const DEFAULT_HTTP_MAX_CONNECTIONS: u32 = 128;
/// Default of `--max-connections-per-ip`.
pub const DEFAULT_MAX_CONNECTIONS_PER_IP: u32 = 512;
/// Default of `--fd-reserve`.
pub const DEFAULT_FD_RESERVE: u64 = 128;
/// The most connections `--max-connections` 0 (auto) allows the gRPC port, however high the
/// descriptor limit: about 10 KiB of memory each while idle, more with streams.
pub const AUTO_MAX_CONNECTIONS: u64 = 4096;
/// The fewest connections the auto cap may leave the gRPC port before start-up fails.
pub const MIN_AUTO_CONNECTIONS: u64 = 16;

/// Connection deadlines and caps of both ports.
#[derive(Clone, Debug, Args)]
pub struct ConnArgs {
    /// Longest a gRPC connection may take, from accept (from the end of the TLS handshake with
    /// TLS), to send the whole HTTP/2 connection preface and its first SETTINGS frame
    /// (100ms..=5m); then it is closed. Real clients send both at once.
    #[arg(long, env = "JOBWIRE_GRPC_PREFACE_TIMEOUT", default_value = "10s", value_parser = humantime::parse_duration)]
    pub grpc_preface_timeout: Duration,

    /// How long a gRPC connection may be silent before the server sends it an HTTP/2 PING
    /// (100ms..=1h), streams or not; with --grpc-keepalive-timeout this closes a connection
    /// whose peer is gone or never answers, while a live client's stack answers by itself.
    #[arg(long, env = "JOBWIRE_GRPC_KEEPALIVE_INTERVAL", default_value = "20s", value_parser = humantime::parse_duration)]
    pub grpc_keepalive_interval: Duration,

    /// How long the server waits for the answer to its keepalive PING before it closes the
    /// gRPC connection (100ms..=10m).
    #[arg(long, env = "JOBWIRE_GRPC_KEEPALIVE_TIMEOUT", default_value = "10s", value_parser = humantime::parse_duration)]
    pub grpc_keepalive_timeout: Duration,

    /// gRPC connections open at once (TLS handshakes included), 0 = auto: the descriptor limit
    /// (RLIMIT_NOFILE, raised to its hard limit at start) less --fd-reserve and the HTTP
    /// listeners' --http-max-connections, at most 4096. At the cap the port stops accepting
    /// (new connections wait in the kernel's backlog) until one closes.
    #[arg(long, env = "JOBWIRE_MAX_CONNECTIONS", default_value_t = 0)]
    pub max_connections: u64,

    /// Connections one peer IP address may have open on each port (1..=1000000); the next one
    /// is closed at once (jobwire_connections_refused_total{reason="per_ip_limit"}).
    #[arg(long, env = "JOBWIRE_MAX_CONNECTIONS_PER_IP", default_value_t = DEFAULT_MAX_CONNECTIONS_PER_IP)]
    pub max_connections_per_ip: u32,

    /// File descriptors kept free of connections (16..=100000): for the auth, TLS and token
    /// file reloads, Redis (re)connections, the embedded redis-server and logs.
    #[arg(long, env = "JOBWIRE_FD_RESERVE", default_value_t = DEFAULT_FD_RESERVE)]
    pub fd_reserve: u64,

    /// Connections open at once on each HTTP listener (--http-addr, and --metrics-addr when
    /// given), 1..=100000. At the cap the listener stops accepting until one closes.
    #[arg(long, env = "JOBWIRE_HTTP_MAX_CONNECTIONS", default_value_t = DEFAULT_HTTP_MAX_CONNECTIONS)]
    pub http_max_connections: u32,

    /// Longest the HTTP port waits for a request's headers (100ms..=5m), counted from the
    /// connection's accept or the end of its previous response: also the keep-alive idle
    /// timeout. Then the connection is closed.
    #[arg(long, env = "JOBWIRE_HTTP_HEADER_READ_TIMEOUT", default_value = "10s", value_parser = humantime::parse_duration)]
    pub http_header_read_timeout: Duration,

    /// Longest the HTTP port waits, after a request's headers, for the whole body (100ms..=10m;
    /// 408 past it); also how long writing a response may stall. The handler's own work is
    /// not cut off (a dashboard purge runs to its end and its audit line).
    #[arg(long, env = "JOBWIRE_HTTP_REQUEST_TIMEOUT", default_value = "30s", value_parser = humantime::parse_duration)]
    pub http_request_timeout: Duration,

    /// Largest request body the HTTP port takes, bytes (1024..=16777216); a larger one gets
    /// 413 without being read further.
    #[arg(long, env = "JOBWIRE_HTTP_MAX_BODY_BYTES", default_value_t = DEFAULT_MAX_BODY_BYTES)]
    pub http_max_body_bytes: usize,
}

impl Default for ConnArgs {
    /// The same values as the flags' defaults.
    fn default() -> Self {
        Self {
            grpc_preface_timeout: DEFAULT_PREFACE_TIMEOUT,
            grpc_keepalive_interval: DEFAULT_KEEPALIVE_INTERVAL,
            grpc_keepalive_timeout: DEFAULT_KEEPALIVE_TIMEOUT,
            max_connections: 0,
            max_connections_per_ip: DEFAULT_MAX_CONNECTIONS_PER_IP,
            fd_reserve: DEFAULT_FD_RESERVE,
            http_max_connections: DEFAULT_HTTP_MAX_CONNECTIONS,
            http_header_read_timeout: DEFAULT_HEADER_READ_TIMEOUT,
            http_request_timeout: DEFAULT_REQUEST_TIMEOUT,
            http_max_body_bytes: DEFAULT_MAX_BODY_BYTES,
        }
    }
}

impl ConnArgs {
    /// Checks what clap cannot; the error names the flag.
    pub fn validate(&self) -> Result<(), String> {
        let range = |flag: &str, v: u64, lo: u64, hi: u64| {
            if (lo..=hi).contains(&v) {
                Ok(())
            } else {
                Err(format!("--{flag} must be between {lo} and {hi}, got {v}"))
            }
        };
        let within = |flag: &str, v: Duration, lo: Duration, hi: Duration| {
            if (lo..=hi).contains(&v) {
                Ok(())
            } else {
                let f = |d| humantime::format_duration(d).to_string();
                Err(format!(
                    "--{flag} must be between {} and {}, got {}",
                    f(lo),
                    f(hi),
                    f(v)
                ))
            }
        };
        let ms = Duration::from_millis;
        let min = |n: u64| Duration::from_secs(60 * n);
        within(
            "grpc-preface-timeout",
            self.grpc_preface_timeout,
            ms(100),
            min(5),
        )?;
        within(
            "grpc-keepalive-interval",
            self.grpc_keepalive_interval,
            ms(100),
            min(60),
        )?;
        within(
            "grpc-keepalive-timeout",
            self.grpc_keepalive_timeout,
            ms(100),
            min(10),
        )?;
        range("max-connections", self.max_connections, 0, 1_000_000)?;
        range(
            "max-connections-per-ip",
            self.max_connections_per_ip.into(),
            1,
            1_000_000,
        )?;
        range("fd-reserve", self.fd_reserve, 16, 100_000)?;
        range(
            "http-max-connections",
            self.http_max_connections.into(),
            1,
            100_000,
        )?;
        within(
            "http-header-read-timeout",
            self.http_header_read_timeout,
            ms(100),
            min(5),
        )?;
        within(
            "http-request-timeout",
            self.http_request_timeout,
            ms(100),
            min(10),
        )?;
        range(
            "http-max-body-bytes",
            self.http_max_body_bytes as u64,
            1024,
            16 << 20,
        )?;
        Ok(())
    }

    /// The gRPC port's connection cap under a descriptor limit of `nofile` with
    /// `http_listeners` HTTP listeners: `--max-connections` when given, else the limit less
    /// `--fd-reserve` and `http_listeners` x `--http-max-connections`, at most
    /// [`AUTO_MAX_CONNECTIONS`]. Errors (naming the flags) when the auto cap would leave fewer
    /// than [`MIN_AUTO_CONNECTIONS`].
    pub fn grpc_connection_cap(&self, nofile: u64, http_listeners: u64) -> Result<u64, String> {
        if self.max_connections > 0 {
            return Ok(self.max_connections);
        }
        let http = http_listeners * u64::from(self.http_max_connections);
        let left = nofile.saturating_sub(self.fd_reserve + http);
        if left < MIN_AUTO_CONNECTIONS {
            return Err(format!(
                "the descriptor limit (ulimit -n) {nofile} leaves {left} gRPC connections after \
                 --fd-reserve {} and {http_listeners} x --http-max-connections {}: raise the \
                 limit, lower those, or give --max-connections",
                self.fd_reserve, self.http_max_connections
            ));
        }
        Ok(left.min(AUTO_MAX_CONNECTIONS))
    }

    /// `JOBWIRE_*=value` lines for `--print-config`.
    pub fn effective(&self) -> Vec<(&'static str, String)> {
        let d = |d: Duration| humantime::format_duration(d).to_string();
        vec![
            ("JOBWIRE_GRPC_PREFACE_TIMEOUT", d(self.grpc_preface_timeout)),
            (
                "JOBWIRE_GRPC_KEEPALIVE_INTERVAL",
                d(self.grpc_keepalive_interval),
            ),
            (
                "JOBWIRE_GRPC_KEEPALIVE_TIMEOUT",
                d(self.grpc_keepalive_timeout),
            ),
            ("JOBWIRE_MAX_CONNECTIONS", self.max_connections.to_string()),
            (
                "JOBWIRE_MAX_CONNECTIONS_PER_IP",
                self.max_connections_per_ip.to_string(),
            ),
            ("JOBWIRE_FD_RESERVE", self.fd_reserve.to_string()),
            (
                "JOBWIRE_HTTP_MAX_CONNECTIONS",
                self.http_max_connections.to_string(),
            ),
            (
                "JOBWIRE_HTTP_HEADER_READ_TIMEOUT",
                d(self.http_header_read_timeout),
            ),
            ("JOBWIRE_HTTP_REQUEST_TIMEOUT", d(self.http_request_timeout)),
            (
                "JOBWIRE_HTTP_MAX_BODY_BYTES",
                self.http_max_body_bytes.to_string(),
            ),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn serve(args: &[&str]) -> ConnArgs {
        crate::config::tests::serve(args).expect("parse").conn
    }

    #[test]
    fn the_flag_defaults_equal_default_and_are_valid() {
        let a = serve(&[]);
        assert_eq!(a.effective(), ConnArgs::default().effective());
        a.validate().expect("defaults valid");
    }

    #[test]
    fn each_flag_parses_and_shows_in_print_config() {
        let a = serve(&[
            "--grpc-preface-timeout",
            "2s",
            "--grpc-keepalive-interval",
            "1s",
            "--grpc-keepalive-timeout",
            "500ms",
            "--max-connections",
            "300",
            "--max-connections-per-ip",
            "40",
            "--fd-reserve",
            "64",
            "--http-max-connections",
            "32",
            "--http-header-read-timeout",
            "3s",
            "--http-request-timeout",
            "4s",
            "--http-max-body-bytes",
            "2048",
        ]);
        a.validate().expect("valid");
        let lines: Vec<String> = a
            .effective()
            .into_iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        for want in [
            "JOBWIRE_GRPC_PREFACE_TIMEOUT=2s",
            "JOBWIRE_GRPC_KEEPALIVE_INTERVAL=1s",
            "JOBWIRE_GRPC_KEEPALIVE_TIMEOUT=500ms",
            "JOBWIRE_MAX_CONNECTIONS=300",
            "JOBWIRE_MAX_CONNECTIONS_PER_IP=40",
            "JOBWIRE_FD_RESERVE=64",
            "JOBWIRE_HTTP_MAX_CONNECTIONS=32",
            "JOBWIRE_HTTP_HEADER_READ_TIMEOUT=3s",
            "JOBWIRE_HTTP_REQUEST_TIMEOUT=4s",
            "JOBWIRE_HTTP_MAX_BODY_BYTES=2048",
        ] {
            assert!(lines.iter().any(|l| l == want), "{want} in {lines:?}");
        }
    }

    #[test]
    fn out_of_range_values_name_their_flag() {
        let cases: [(&[&str], &str); 10] = [
            (
                &["--grpc-preface-timeout", "50ms"],
                "--grpc-preface-timeout",
            ),
            (
                &["--grpc-keepalive-interval", "2h"],
                "--grpc-keepalive-interval",
            ),
            (
                &["--grpc-keepalive-timeout", "0s"],
                "--grpc-keepalive-timeout",
            ),
            (&["--max-connections", "2000000"], "--max-connections"),
            (
                &["--max-connections-per-ip", "0"],
                "--max-connections-per-ip",
            ),
            (&["--fd-reserve", "8"], "--fd-reserve"),
            (&["--http-max-connections", "0"], "--http-max-connections"),
            (
                &["--http-header-read-timeout", "10m"],
                "--http-header-read-timeout",
            ),
            (&["--http-request-timeout", "1h"], "--http-request-timeout"),
            (&["--http-max-body-bytes", "100"], "--http-max-body-bytes"),
        ];
        for (args, flag) in cases {
            let e = serve(args).validate().expect_err(flag);
            assert!(e.starts_with(flag), "{e}");
        }
    }

    #[test]
    fn the_auto_cap_is_the_limit_less_the_reserve_and_the_http_listeners() {
        let a = ConnArgs::default();
        // 1024 - 128 - 128 = 768.
        assert_eq!(a.grpc_connection_cap(1024, 1), Ok(768));
        // With --metrics-addr: two HTTP listeners.
        assert_eq!(a.grpc_connection_cap(1024, 2), Ok(640));
        assert_eq!(
            a.grpc_connection_cap(1 << 20, 1),
            Ok(AUTO_MAX_CONNECTIONS),
            "capped however high the limit"
        );
        let e = a.grpc_connection_cap(256, 1).expect_err("too few left");
        assert!(e.contains("--fd-reserve"), "{e}");
        let explicit = ConnArgs {
            max_connections: 50,
            ..ConnArgs::default()
        };
        assert_eq!(explicit.grpc_connection_cap(256, 1), Ok(50));
    }
}
