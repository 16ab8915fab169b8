//! `serve` flags of the web dashboard (`--ui`, `--ui-read-only`, the session timeouts and
//! limits, the login rate, the cookie's `Secure` attribute), the host names the HTTP port's
//! browser-reachable routes answer to (`--http-allowed-hosts`, for `/ui` and `/metrics`), and
//! the dashboard's bind rule: without an auth file the dashboard gives every visitor every
//! right, so it stays on a loopback HTTP address unless `--insecure`.

use std::net::SocketAddr;
use std::time::Duration;

use clap::Args;

/// Shortest session timeout (idle or absolute).
const MIN_SESSION: Duration = Duration::from_secs(60);
/// Longest session timeout (idle or absolute): 7 days.
const MAX_SESSION: Duration = Duration::from_secs(7 * 24 * 3600);
/// Default of `--ui-max-sessions-per-principal`.
pub const DEFAULT_MAX_SESSIONS_PER_PRINCIPAL: u32 = 20;
/// Default of `--ui-login-rate` (logins a minute from one client address).
pub const DEFAULT_LOGIN_RATE: u32 = 60;

/// The dashboard at `/ui` on the HTTP port. Off by default: every `/ui` path is 404.
#[derive(Clone, Debug, Args)]
pub struct UiArgs {
    /// Serve the web dashboard at /ui on the HTTP port (--http-addr). Visitors log in with a
    /// bearer token of the auth file; every read and action is a gRPC call made in process
    /// with that token, so it is authorized and audited like any client's. Without
    /// --auth-file every visitor is `anonymous` with every right (loopback only, unless
    /// --insecure).
    #[arg(long = "ui", env = "JOBWIRE_UI")]
    pub enabled: bool,

    /// Hide and refuse every dashboard action (pause, resume, purge, replay, delete) for
    /// everyone, admins included: the dashboard only shows.
    #[arg(long = "ui-read-only", env = "JOBWIRE_UI_READ_ONLY")]
    pub read_only: bool,

    /// A dashboard session unused for this long ends (1m..=7d).
    #[arg(long = "ui-session-idle", env = "JOBWIRE_UI_SESSION_IDLE", default_value = "30m", value_parser = humantime::parse_duration)]
    pub session_idle: Duration,

    /// A dashboard session ends this long after its login, used or not (1m..=7d).
    #[arg(long = "ui-session-max", env = "JOBWIRE_UI_SESSION_MAX", default_value = "12h", value_parser = humantime::parse_duration)]
    pub session_max: Duration,

    /// Mark the session cookie `Secure` (the browser then sends it over HTTPS only): set it
    /// when a TLS-terminating proxy serves the dashboard, as it should off loopback.
    #[arg(long = "ui-cookie-secure", env = "JOBWIRE_UI_COOKIE_SECURE")]
    pub cookie_secure: bool,

    /// Dashboard sessions one principal may have at once (1..=1000); its next login ends its
    /// own oldest session, never another principal's. Not applied without an auth file
    /// (every visitor is `anonymous`).
    #[arg(long = "ui-max-sessions-per-principal", env = "JOBWIRE_UI_MAX_SESSIONS_PER_PRINCIPAL", default_value_t = DEFAULT_MAX_SESSIONS_PER_PRINCIPAL)]
    pub max_sessions_per_principal: u32,

    /// Login attempts a minute from one client address (an IPv6 client by its /64), good
    /// or bad token alike (1..=10000), with as many at once; past it POST /ui/login gets 429
    /// with Retry-After.
    #[arg(long = "ui-login-rate", env = "JOBWIRE_UI_LOGIN_RATE", default_value_t = DEFAULT_LOGIN_RATE)]
    pub login_rate: u32,

    /// Host names (comma-separated, no port) /ui and /metrics answer to besides IP
    /// addresses, `localhost` and `*.localhost`, e.g. the dashboard's name behind an Ingress;
    /// a request for another host gets 421 (a guard against DNS rebinding). /metrics behind
    /// --metrics-token-file, /healthz and /readyz answer to any host. `*`: any host (no
    /// guard).
    #[arg(
        long = "http-allowed-hosts",
        env = "JOBWIRE_HTTP_ALLOWED_HOSTS",
        value_delimiter = ','
    )]
    pub http_allowed_hosts: Vec<String>,
}

impl Default for UiArgs {
    fn default() -> Self {
        UiArgs {
            enabled: false,
            read_only: false,
            session_idle: Duration::from_secs(30 * 60),
            session_max: Duration::from_secs(12 * 3600),
            cookie_secure: false,
            max_sessions_per_principal: DEFAULT_MAX_SESSIONS_PER_PRINCIPAL,
            login_rate: DEFAULT_LOGIN_RATE,
            http_allowed_hosts: Vec::new(),
        }
    }
}

impl UiArgs {
    /// Checks what clap cannot; the error names the flag.
    pub fn validate(&self) -> Result<(), String> {
        for (flag, value) in [
            ("ui-session-idle", self.session_idle),
            ("ui-session-max", self.session_max),
        ] {
            if !(MIN_SESSION..=MAX_SESSION).contains(&value) {
                return Err(format!(
                    "--{flag} must be between 1m and 7days, got {}",
                    humantime::format_duration(value)
                ));
            }
        }
        if !(1..=1000).contains(&self.max_sessions_per_principal) {
            return Err(format!(
                "--ui-max-sessions-per-principal must be between 1 and 1000, got {}",
                self.max_sessions_per_principal
            ));
        }
        if !(1..=10_000).contains(&self.login_rate) {
            return Err(format!(
                "--ui-login-rate must be between 1 and 10000 (logins a minute), got {}",
                self.login_rate
            ));
        }
        for name in self.http_allowed_hosts.iter().filter(|n| !n.is_empty()) {
            if !host_name(name) {
                return Err(format!(
                    "--http-allowed-hosts: {name:?} is not a host name (letters, digits, '-' \
                     and '.', no port, at most 253 bytes) nor `*`"
                ));
            }
        }
        Ok(())
    }

    /// The bind rule: with `--ui` and no auth file, `http_addr` must be loopback unless
    /// `insecure`, since every visitor would have every right.
    pub fn check_bind(
        &self,
        has_auth_file: bool,
        insecure: bool,
        http_addr: SocketAddr,
    ) -> Result<(), String> {
        if self.enabled && !has_auth_file && !insecure && !http_addr.ip().is_loopback() {
            return Err(format!(
                "--ui with --http-addr {http_addr} (not a loopback address) and no --auth-file \
                 would let anyone who can reach it pause, purge, replay and delete: give \
                 --auth-file FILE, bind --http-addr 127.0.0.1:PORT, or pass --insecure on a \
                 trusted network"
            ));
        }
        Ok(())
    }

    /// `JOBWIRE_*=value` lines for `--print-config`.
    pub fn effective(&self) -> Vec<(&'static str, String)> {
        let d = |d: Duration| humantime::format_duration(d).to_string();
        vec![
            ("JOBWIRE_UI", self.enabled.to_string()),
            ("JOBWIRE_UI_READ_ONLY", self.read_only.to_string()),
            ("JOBWIRE_UI_SESSION_IDLE", d(self.session_idle)),
            ("JOBWIRE_UI_SESSION_MAX", d(self.session_max)),
            ("JOBWIRE_UI_COOKIE_SECURE", self.cookie_secure.to_string()),
            (
                "JOBWIRE_UI_MAX_SESSIONS_PER_PRINCIPAL",
                self.max_sessions_per_principal.to_string(),
            ),
            ("JOBWIRE_UI_LOGIN_RATE", self.login_rate.to_string()),
            (
                "JOBWIRE_HTTP_ALLOWED_HOSTS",
                self.http_allowed_hosts.join(","),
            ),
        ]
    }
}

/// A DNS name `--http-allowed-hosts` takes (or `*`): 1 to 253 bytes of letters, digits,
/// `-`, `_` and `.`, a trailing dot allowed, no empty label.
fn host_name(name: &str) -> bool {
    if name == crate::http::ANY_HOST {
        return true;
    }
    let name = name.strip_suffix('.').unwrap_or(name);
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        ui: UiArgs,
    }

    fn parse(args: &[&str]) -> UiArgs {
        Cli::try_parse_from(std::iter::once("jobwire").chain(args.iter().copied()))
            .expect("parses")
            .ui
    }

    #[test]
    fn defaults_match_the_default_impl() {
        let (p, d) = (parse(&[]), UiArgs::default());
        assert_eq!(p.max_sessions_per_principal, d.max_sessions_per_principal);
        assert_eq!(p.max_sessions_per_principal, 20);
        assert_eq!(p.login_rate, d.login_rate);
        assert_eq!(p.login_rate, 60);
        assert!(p.http_allowed_hosts.is_empty());
        d.validate().expect("the defaults are valid");
    }

    #[test]
    fn the_new_flags_parse_and_their_ranges_name_the_flag() {
        let a = parse(&[
            "--ui-max-sessions-per-principal",
            "3",
            "--ui-login-rate",
            "5",
            "--http-allowed-hosts",
            "jobs.example.com,Dash.Example.org.",
        ]);
        assert_eq!(a.max_sessions_per_principal, 3);
        assert_eq!(a.login_rate, 5);
        assert_eq!(
            a.http_allowed_hosts,
            ["jobs.example.com", "Dash.Example.org."]
        );
        a.validate().expect("valid");
        assert!(a.effective().contains(&(
            "JOBWIRE_HTTP_ALLOWED_HOSTS",
            "jobs.example.com,Dash.Example.org.".into()
        )));

        for (args, flag) in [
            (
                &["--ui-max-sessions-per-principal", "0"][..],
                "--ui-max-sessions-per-principal",
            ),
            (
                &["--ui-max-sessions-per-principal", "1001"][..],
                "--ui-max-sessions-per-principal",
            ),
            (&["--ui-login-rate", "0"][..], "--ui-login-rate"),
            (&["--ui-login-rate", "10001"][..], "--ui-login-rate"),
            (
                &["--http-allowed-hosts", "jobs.example.com:443"][..],
                "--http-allowed-hosts",
            ),
            (
                &["--http-allowed-hosts", "a..b"][..],
                "--http-allowed-hosts",
            ),
            (
                &["--http-allowed-hosts", "http://x"][..],
                "--http-allowed-hosts",
            ),
        ] {
            let e = parse(args).validate().expect_err("out of range");
            assert!(e.contains(flag), "{e}");
        }
        parse(&["--http-allowed-hosts", "*"])
            .validate()
            .expect("* is any host");
    }
}
