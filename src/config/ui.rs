//! `serve` flags of the web dashboard (`--ui`, `--ui-read-only`, the session timeouts and the
//! cookie's `Secure` attribute), and its bind rule: without an auth file the dashboard gives
//! every visitor every right, so it stays on a loopback HTTP address unless `--insecure`.

use std::net::SocketAddr;
use std::time::Duration;

use clap::Args;

/// Shortest session timeout (idle or absolute).
const MIN_SESSION: Duration = Duration::from_secs(60);
/// Longest session timeout (idle or absolute): 7 days.
const MAX_SESSION: Duration = Duration::from_secs(7 * 24 * 3600);

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
}

impl Default for UiArgs {
    fn default() -> Self {
        UiArgs {
            enabled: false,
            read_only: false,
            session_idle: Duration::from_secs(30 * 60),
            session_max: Duration::from_secs(12 * 3600),
            cookie_secure: false,
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
        ]
    }
}
