//! The real `jobwire` binary as a child process under a low descriptor limit
//! (`ulimit -n`), for the connection-deadline and HTTP-limit tests: its addresses from the
//! "jobwire serving" log line, its open descriptors (/proc/<pid>/fd) and memory
//! (/proc/<pid>/status), and raw connections from chosen loopback source addresses (each
//! 127.0.0.x is its own peer IP to the per-IP cap).

use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::net::{TcpSocket, TcpStream};
use tokio::process::Child;
use tokio::sync::mpsc;

/// A running `jobwire serve`.
pub struct Server {
    pub child: Child,
    pub pid: u32,
    pub grpc: SocketAddr,
    pub http: SocketAddr,
    /// The JSON log lines after "jobwire serving".
    pub logs: mpsc::UnboundedReceiver<Value>,
}

impl Server {
    /// Starts `jobwire serve` with `args` (after the loopback addresses and `redis_url`)
    /// under `ulimit -n nofile` (soft and hard), and waits for it to serve.
    pub async fn start(nofile: u32, redis_url: &str, args: &[&str]) -> Server {
        let mut child = tokio::process::Command::new("bash")
            .arg("-c")
            .arg(format!("ulimit -n {nofile} && exec \"$0\" \"$@\""))
            .arg(env!("CARGO_BIN_EXE_jobwire"))
            .args([
                "serve",
                "--log-format",
                "json",
                "--grpc-addr",
                "127.0.0.1:0",
                "--http-addr",
                "127.0.0.1:0",
                "--redis-url",
                redis_url,
            ])
            .args(args)
            .env("RUST_LOG", "info")
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn jobwire");
        let pid = child.id().expect("pid");
        let mut stderr = BufReader::new(child.stderr.take().expect("stderr")).lines();
        let (tx, mut logs) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Ok(Some(line)) = stderr.next_line().await {
                match serde_json::from_str::<Value>(&line) {
                    Ok(v) => {
                        let _ = tx.send(v);
                    }
                    Err(_) => eprintln!("jobwire: {line}"),
                }
            }
        });
        let serving = loop {
            let v = tokio::time::timeout(Duration::from_secs(30), logs.recv())
                .await
                .expect("started within 30 s")
                .expect("jobwire exited before serving");
            if v["message"] == "jobwire serving" {
                break v;
            }
        };
        let addr = |k: &str| -> SocketAddr {
            serving[k]
                .as_str()
                .expect("address in the log")
                .parse()
                .expect("addr")
        };
        Server {
            child,
            pid,
            grpc: addr("grpc"),
            http: addr("http"),
            logs,
        }
    }

    /// Descriptors the server has open now.
    pub fn fds(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.pid))
            .map(|d| d.count())
            .unwrap_or(0)
    }

    /// A `Vm*` field of /proc/<pid>/status, KiB.
    pub fn vm_kib(&self, field: &str) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid)).expect("status");
        status
            .lines()
            .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
            .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())
            .unwrap_or_else(|| panic!("{field} in /proc/{}/status", self.pid))
    }

    /// The log lines received so far whose message contains `text`.
    pub fn drain_logs_matching(&mut self, text: &str) -> Vec<Value> {
        let mut out = Vec::new();
        while let Ok(v) = self.logs.try_recv() {
            if v.to_string().contains(text) {
                out.push(v);
            }
        }
        out
    }
}

/// A TCP connection to `to` from the loopback address `from` (port chosen by the OS), or
/// `None` when it is not established within `patience`.
pub async fn connect_from(from: IpAddr, to: SocketAddr, patience: Duration) -> Option<TcpStream> {
    let sock = TcpSocket::new_v4().ok()?;
    sock.bind(SocketAddr::new(from, 0)).ok()?;
    tokio::time::timeout(patience, sock.connect(to))
        .await
        .ok()?
        .ok()
}

/// `127.0.0.<n>`.
pub fn loopback(n: u8) -> IpAddr {
    IpAddr::from([127, 0, 0, n])
}

/// Waits until the server closes `s` (EOF or an error), reading and dropping whatever it
/// sends; the time that took, or `None` past `patience`.
pub async fn closed_by_server(s: &mut TcpStream, patience: Duration) -> Option<Duration> {
    use tokio::io::AsyncReadExt;
    let start = tokio::time::Instant::now();
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout_at(start + patience, s.read(&mut buf)).await {
            Err(_) => return None,
            Ok(Ok(0)) | Ok(Err(_)) => return Some(start.elapsed()),
            Ok(Ok(_)) => {}
        }
    }
}

/// Writes an auth file to `path` atomically (write and rename), as a Secret update does.
pub fn write_atomically(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).expect("write");
    std::fs::rename(&tmp, path).expect("rename");
}

/// `GET /healthz` on a new connection: the status line, or what went wrong.
pub async fn healthz(http: SocketAddr) -> Result<String, String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = TcpStream::connect(http)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .map_err(|e| format!("write: {e}"))?;
    let mut out = String::new();
    s.read_to_string(&mut out)
        .await
        .map_err(|e| format!("read: {e}"))?;
    Ok(out.lines().next().unwrap_or_default().to_owned())
}
