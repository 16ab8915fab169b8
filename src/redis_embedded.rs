//! The embedded default store: a `redis-server` child process on a Unix socket in the data dir.
//!
//! Used when no `--redis-url` is given (as Faktory does). The child runs with append-only
//! persistence, no RDB snapshots and `noeviction`, listens on `<data_dir>/redis.sock` only (no TCP
//! port), and logs to `<data_dir>/redis.log`. Its files are private (they hold every payload):
//! the child is started through `sh -c 'umask 077 && exec redis-server …'`, so the umask applies
//! to the child alone (jobwire's own umask never changes, so no other thread races a changed
//! one) and its append-only files and the log are 0600, `appendonlydir` 0700. A data dir
//! jobwire creates is 0700; an existing one keeps its mode (it is the user's: `--data-dir .`
//! must not chmod a working directory), with a warning when others may read it.
//! The child runs in its own process group: a terminal's Ctrl-C (SIGINT to the foreground group)
//! reaches jobwire only, which hands its leases back and then stops the child.
//!
//! Invariants:
//! - [`EmbeddedRedis::start`] returns only once the server answers PING, i.e. after it has loaded
//!   its append-only file, or fails within a bounded time with the tail of `redis.log`.
//! - [`EmbeddedRedis::stop`] sends `SHUTDOWN`, which flushes the append-only file, before it
//!   reaps the child. Dropping an `EmbeddedRedis` without `stop` (an error or a panic that
//!   unwinds) kills the child (SIGKILL); writes not yet fsynced may then be lost.
//! - On Linux the child never outlives jobwire, however jobwire dies: when it is SIGKILLed (the
//!   OOM killer, `kill -9`) or exits without unwinding, none of its code runs, and the kernel
//!   sends the child SIGTERM instead (prctl `PR_SET_PDEATHSIG`, see `lifeline`), on which Redis
//!   flushes and fsyncs its append-only file, removes the socket and exits. Elsewhere (macOS,
//!   the BSDs) such a death leaves the child running: the next start on the data dir refuses
//!   (below) until it is stopped by hand.
//! - A live server already using the data dir is refused rather than displaced (after 2 s, in
//!   case it is one shutting down because its jobwire just died); a stale socket left by a
//!   crash is removed.

use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use tokio::process::{Child, Command};
use tokio::time::{sleep, timeout, Instant};

use crate::config::Fsync;

/// How long `start` waits for the first PONG and `stop` waits for the child to exit.
const PROCESS_TIMEOUT: Duration = Duration::from_secs(10);
/// Pause between readiness probes.
const POLL_INTERVAL: Duration = Duration::from_millis(20);
/// Bound on one connect + command round trip.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(1);
/// Longest Unix socket path the kernel accepts (`sun_path` is 108 bytes including the NUL).
const MAX_SOCKET_PATH: usize = 107;
/// How long a server found answering on the data dir's socket gets to go away before `start`
/// refuses: one whose jobwire just died is shutting down on its death signal (`lifeline`),
/// which takes about 100 ms.
const DYING_SERVER_GRACE: Duration = Duration::from_secs(2);
/// How much of `redis.log` to quote in errors.
const LOG_TAIL_LINES: usize = 20;

/// Why the embedded Redis could not be started.
#[derive(Debug, thiserror::Error)]
pub enum EmbeddedError {
    /// The binary is missing; the message tells the operator both ways out.
    #[error("redis-server was not found on the PATH; install it (Debian/Ubuntu: `sudo apt-get install -y redis-server`) or pass --redis-url")]
    NotFound,
    /// Creating or preparing the data directory failed.
    #[error("cannot prepare data directory {path}: {source}")]
    DataDir {
        /// The directory or file involved.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The socket path would exceed the kernel's limit; use a shorter `--data-dir`.
    #[error("socket path {0} is longer than {MAX_SOCKET_PATH} bytes; use a shorter --data-dir")]
    SocketPathTooLong(PathBuf),
    /// Another server answers on the data dir's socket; two servers must not share one AOF.
    #[error("a redis-server is already running on {0}; is another jobwire using this --data-dir?")]
    AlreadyRunning(PathBuf),
    /// The data dir's path does not form a usable `redis+unix://` URL (e.g. it contains `?`).
    #[error(
        "data directory gives an unusable Redis URL {url}: {reason}; use a plainer --data-dir"
    )]
    InvalidUrl {
        /// The URL that was built.
        url: String,
        /// Why the redis crate rejected it.
        reason: String,
    },
    /// The process could not be spawned for another reason (permissions, ...).
    #[error("cannot start redis-server: {0}")]
    Spawn(#[source] std::io::Error),
    /// The child exited before it answered PING.
    #[error(
        "redis-server exited during start-up ({status}); last lines of redis.log:\n{log_tail}"
    )]
    ExitedEarly {
        /// The child's exit status.
        status: ExitStatus,
        /// The end of `redis.log` (also holds the child's stderr).
        log_tail: String,
    },
    /// The child did not answer PING in time; it has been killed.
    #[error(
        "redis-server did not answer PING within {timeout:?}; last lines of redis.log:\n{log_tail}"
    )]
    StartTimeout {
        /// The bound that was exceeded.
        timeout: Duration,
        /// The end of `redis.log`.
        log_tail: String,
    },
}

/// A running `redis-server` child owned by this process.
#[derive(Debug)]
pub struct EmbeddedRedis {
    child: Child,
    socket: PathBuf,
    client: redis::Client,
}

impl EmbeddedRedis {
    /// Starts `redis-server` from the PATH in `data_dir` (created if needed) and waits until it
    /// answers PING.
    pub async fn start(data_dir: &Path, fsync: Fsync) -> Result<Self, EmbeddedError> {
        Self::start_with_binary("redis-server", data_dir, fsync).await
    }

    /// As [`EmbeddedRedis::start`], with the binary to run named explicitly (tests, custom builds).
    pub async fn start_with_binary(
        binary: &str,
        data_dir: &Path,
        fsync: Fsync,
    ) -> Result<Self, EmbeddedError> {
        let data_err = |path: &Path| {
            let path = path.to_path_buf();
            move |source| EmbeddedError::DataDir { path, source }
        };
        let existed = std::fs::symlink_metadata(data_dir).is_ok();
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(PRIVATE_DIR)
            .create(data_dir)
            .map_err(data_err(data_dir))?;
        // Absolute paths: redis-server chdirs into --dir, and the URL must not depend on our cwd.
        let dir = tokio::fs::canonicalize(data_dir)
            .await
            .map_err(data_err(data_dir))?;
        let socket = dir.join("redis.sock");
        let log = dir.join("redis.log");
        if existed {
            if let Some(w) = exposed_dir_warning(&dir) {
                tracing::warn!("{w}");
            }
        }
        make_private(&dir).map_err(data_err(&dir))?;
        if socket.as_os_str().len() > MAX_SOCKET_PATH {
            return Err(EmbeddedError::SocketPathTooLong(socket));
        }
        let url = unix_url(&socket);
        let client =
            redis::Client::open(url.as_str()).map_err(|err| EmbeddedError::InvalidUrl {
                url: url.clone(),
                reason: err.to_string(),
            })?;
        if tokio::fs::symlink_metadata(&socket).await.is_ok() {
            if still_served(&socket).await {
                return Err(EmbeddedError::AlreadyRunning(socket));
            }
            match tokio::fs::remove_file(&socket).await {
                // A server shutting down removes its socket on the way out.
                Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
                r => r.map_err(data_err(&socket))?,
            }
        }
        // The child's stdout/stderr go to redis.log too: config errors are printed before
        // --logfile takes effect, and the log tail in our errors should show them.
        let log_file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(PRIVATE_FILE)
            .open(&log)
            .map_err(data_err(&log))?;
        let log_file2 = log_file.try_clone().map_err(data_err(&log))?;

        // A shell sets the umask for the child alone, then becomes redis-server (same pid, so
        // process group, kill-on-drop and the parent-death signal apply to it): 077 makes every file it creates (AOF
        // files, appendonlydir, rewrites) 0600/0700. `$0` is the binary, `$@` its arguments.
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(r#"umask 077 && exec "$0" "$@""#)
            .arg(binary)
            .arg("--port")
            .arg("0")
            .arg("--unixsocket")
            .arg(&socket)
            .arg("--unixsocketperm")
            .arg("700")
            .arg("--dir")
            .arg(&dir)
            .arg("--appendonly")
            .arg("yes")
            .arg("--appendfsync")
            .arg(fsync.as_str())
            .arg("--save")
            .arg("")
            .arg("--maxmemory-policy")
            .arg("noeviction")
            .arg("--daemonize")
            .arg("no")
            .arg("--logfile")
            .arg(&log)
            .stdin(Stdio::null())
            .stdout(Stdio::from(log_file))
            .stderr(Stdio::from(log_file2))
            // Its own process group: a Ctrl-C meant for jobwire must not stop the store before
            // jobwire has handed its leases back.
            .process_group(0)
            .kill_on_drop(true);
        let child = lifeline::spawn(cmd).map_err(|err| match err.kind() {
            std::io::ErrorKind::NotFound => EmbeddedError::NotFound,
            _ => EmbeddedError::Spawn(err),
        })?;

        let mut this = Self {
            child,
            socket,
            client,
        };
        this.wait_ready(&log).await?;
        tracing::info!(socket = %this.socket.display(), fsync = fsync.as_str(), "embedded redis-server ready");
        Ok(this)
    }

    /// The `redis+unix://` URL of the server, for the store's client.
    pub fn url(&self) -> String {
        unix_url(&self.socket)
    }

    /// Shuts the server down cleanly (`SHUTDOWN` flushes the append-only file), then reaps the
    /// child, killing it if it has not exited within 10 s.
    pub async fn stop(mut self) {
        let sent = timeout(ATTEMPT_TIMEOUT * 2, async {
            let mut con = self.client.get_multiplexed_async_connection().await?;
            redis::cmd("SHUTDOWN").query_async::<()>(&mut con).await
        })
        .await;
        match sent {
            // The server closes the connection instead of replying, so an I/O error is success.
            Ok(Err(err)) if err.is_io_error() || err.is_connection_dropped() => {}
            Ok(Ok(())) => {}
            Ok(Err(err)) => tracing::warn!(error = %err, "embedded redis-server refused SHUTDOWN"),
            Err(_) => tracing::warn!("embedded redis-server did not take SHUTDOWN in time"),
        }
        match timeout(PROCESS_TIMEOUT, self.child.wait()).await {
            Ok(Ok(status)) if status.success() => tracing::info!("embedded redis-server stopped"),
            Ok(Ok(status)) => tracing::warn!(%status, "embedded redis-server exited abnormally"),
            Ok(Err(err)) => tracing::warn!(error = %err, "cannot wait for embedded redis-server"),
            Err(_) => {
                tracing::warn!(timeout = ?PROCESS_TIMEOUT, "embedded redis-server still running, killing it");
                if let Err(err) = self.child.kill().await {
                    tracing::warn!(error = %err, "cannot kill embedded redis-server");
                }
            }
        }
    }

    /// Polls PING against a deadline, watching for an early exit of the child.
    async fn wait_ready(&mut self, log: &Path) -> Result<(), EmbeddedError> {
        let deadline = Instant::now() + PROCESS_TIMEOUT;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                // The shell's "command not found".
                if status.code() == Some(127) {
                    return Err(EmbeddedError::NotFound);
                }
                return Err(EmbeddedError::ExitedEarly {
                    status,
                    log_tail: log_tail(log).await,
                });
            }
            if self.ping().await {
                return Ok(());
            }
            if Instant::now() >= deadline {
                // Best effort: kill_on_drop would also do it when `self` is dropped.
                let _ = self.child.kill().await;
                return Err(EmbeddedError::StartTimeout {
                    timeout: PROCESS_TIMEOUT,
                    log_tail: log_tail(log).await,
                });
            }
            sleep(POLL_INTERVAL).await;
        }
    }

    /// True once PING answers PONG (not while the socket is missing or the AOF is LOADING).
    async fn ping(&self) -> bool {
        let attempt = async {
            let mut con = self.client.get_multiplexed_async_connection().await?;
            redis::cmd("PING").query_async::<String>(&mut con).await
        };
        matches!(timeout(ATTEMPT_TIMEOUT, attempt).await, Ok(Ok(pong)) if pong == "PONG")
    }
}

/// Mode of the data dir and the directories in it.
const PRIVATE_DIR: u32 = 0o700;
/// Mode of the files in the data dir.
const PRIVATE_FILE: u32 = 0o600;

/// Makes jobwire's own files in `dir` private: `appendonlydir` 0700, the log and append-only
/// files (an earlier version left them readable to others) 0600. `dir` itself is left alone:
/// jobwire creates it 0700, and an existing one is the user's.
fn make_private(dir: &Path) -> std::io::Result<()> {
    use std::fs::Permissions;
    let aof_dir = dir.join("appendonlydir");
    let mut files = vec![dir.join("redis.log")];
    if aof_dir.is_dir() {
        std::fs::set_permissions(&aof_dir, Permissions::from_mode(PRIVATE_DIR))?;
        for e in std::fs::read_dir(&aof_dir)? {
            files.push(e?.path());
        }
    }
    for f in files {
        match std::fs::set_permissions(&f, Permissions::from_mode(PRIVATE_FILE)) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            r => r?,
        }
    }
    Ok(())
}

/// The warning for an existing data dir `dir` that its group or others may enter or read
/// (mode bits in 0o077), naming it and its mode; `None` when private or unreadable.
fn exposed_dir_warning(dir: &Path) -> Option<String> {
    let mode = std::fs::metadata(dir).ok()?.permissions().mode() & 0o777;
    (mode & 0o077 != 0).then(|| {
        format!(
            "data dir {} is mode {mode:04o}: its group or others may reach the embedded Redis's files (kept 0600, but the directory is listable); consider `chmod 700 {}`",
            dir.display(),
            dir.display()
        )
    })
}

/// True while something still accepts connections on `socket` after [`DYING_SERVER_GRACE`].
async fn still_served(socket: &Path) -> bool {
    let deadline = Instant::now() + DYING_SERVER_GRACE;
    while tokio::net::UnixStream::connect(socket).await.is_ok() {
        if Instant::now() >= deadline {
            return true;
        }
        sleep(POLL_INTERVAL).await;
    }
    false
}

fn unix_url(socket: &Path) -> String {
    format!("redis+unix://{}", socket.display())
}

/// The last lines of the log, or a note saying why there are none.
async fn log_tail(log: &Path) -> String {
    match tokio::fs::read(log).await {
        Ok(bytes) => {
            let text = String::from_utf8_lossy(&bytes);
            let lines: Vec<&str> = text.lines().collect();
            lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join("\n")
        }
        Err(err) => format!("(cannot read {}: {err})", log.display()),
    }
}

mod lifeline;
#[cfg(test)]
mod tests;
