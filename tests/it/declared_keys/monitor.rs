//! Reading a `redis-cli monitor` stream for the declared-keys test: the monitor child, its
//! lines parsed into script calls (the FCALL or EVALSHA and the commands it ran), and the keys
//! Redis itself finds in a command.

use std::collections::HashMap;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::AsyncBufReadExt;

use crate::harness::*;

/// `redis-cli monitor` on the test's redis, its lines collected by a task.
pub(super) struct Monitor {
    child: tokio::process::Child,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Monitor {
    pub(super) async fn start(redis: &TestRedis) -> Monitor {
        let sock = redis
            .url
            .strip_prefix("redis+unix://")
            .expect("the harness's redis is on a Unix socket");
        let mut child = tokio::process::Command::new("redis-cli")
            .args(["-s", sock, "monitor"])
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("redis-cli must be on the PATH");
        let out = child.stdout.take().expect("stdout");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = lines.clone();
        tokio::spawn(async move {
            let mut r = tokio::io::BufReader::new(out).lines();
            while let Ok(Some(l)) = r.next_line().await {
                sink.lock().expect("lock").push(l);
            }
        });
        let m = Monitor { child, lines };
        m.mark(redis, "declared-keys-start").await;
        m
    }

    /// Sends `ECHO word` until the monitor shows it: everything before it is in the stream.
    pub(super) async fn mark(&self, redis: &TestRedis, word: &str) {
        let mut c = redis.conn().await;
        let quoted = format!("\"{word}\"");
        eventually(Duration::from_secs(10), || {
            let mut c = c.clone();
            let seen = self
                .lines
                .lock()
                .expect("lock")
                .iter()
                .any(|l| l.ends_with(&quoted));
            async move {
                let _: String = redis::cmd("ECHO")
                    .arg(word)
                    .query_async(&mut c)
                    .await
                    .expect("echo");
                seen
            }
        })
        .await;
        let _ = &mut c;
    }

    pub(super) async fn stop(mut self, redis: &TestRedis) -> Vec<String> {
        self.mark(redis, "declared-keys-end").await;
        let _ = self.child.kill().await;
        let lines = self.lines.lock().expect("lock").clone();
        lines
    }
}

/// One MONITOR line: the client (`lua` for a script's own commands) and the arguments
/// (unescaped: MONITOR quotes each and escapes `\\ \" \n \r \t \a \b` and `\xHH`).
fn parse_line(line: &str) -> Option<(String, Vec<Vec<u8>>)> {
    let open = line.find('[')?;
    let close = open + line[open..].find("] ")?;
    let client = line[open + 1..close].split_once(' ')?.1.to_owned();
    let mut args = Vec::new();
    let b = &line.as_bytes()[close + 2..];
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'"' {
            i += 1;
            continue;
        }
        i += 1;
        let mut arg = Vec::new();
        while i < b.len() && b[i] != b'"' {
            if b[i] == b'\\' && i + 1 < b.len() {
                i += 1;
                match b[i] {
                    b'n' => arg.push(b'\n'),
                    b'r' => arg.push(b'\r'),
                    b't' => arg.push(b'\t'),
                    b'a' => arg.push(7),
                    b'b' => arg.push(8),
                    b'x' => {
                        let hex = std::str::from_utf8(&b[i + 1..i + 3]).ok()?;
                        arg.push(u8::from_str_radix(hex, 16).ok()?);
                        i += 2;
                    }
                    c => arg.push(c),
                }
            } else {
                arg.push(b[i]);
            }
            i += 1;
        }
        args.push(arg);
        i += 1;
    }
    Some((client, args))
}

/// A script's name: the first `-- <name>.lua:` comment that is not the shared prelude's
/// (nor a shared part's: `lease_fn.lua`, `ack_fn.lua`).
fn script_name(source: &[u8]) -> String {
    String::from_utf8_lossy(source)
        .lines()
        .filter_map(|l| l.strip_prefix("-- ")?.split_once(".lua:").map(|(n, _)| n))
        .find(|n| {
            !["common", "groups", "attempts", "lease_fn", "ack_fn"].contains(n) && !n.contains(' ')
        })
        .unwrap_or("?")
        .to_owned()
}

/// The hash tag of a key (the cluster slot is the CRC16 of it): the text between the first
/// `{` and the next `}` when not empty, else the whole key.
pub(super) fn hash_tag(key: &[u8]) -> &[u8] {
    if let Some(o) = key.iter().position(|&c| c == b'{') {
        if let Some(len) = key[o + 1..].iter().position(|&c| c == b'}') {
            if len > 0 {
                return &key[o + 1..o + 1 + len];
            }
        }
    }
    key
}

/// One script call: its name (its SHA1 while the stream is read), its declared keys and the commands it ran.
pub(super) struct Call {
    pub(super) name: String,
    pub(super) keys: Vec<Vec<u8>>,
    pub(super) ran: Vec<Vec<Vec<u8>>>,
}

/// The script calls of a MONITOR stream.
pub(super) fn calls(lines: &[String]) -> Vec<Call> {
    let mut names: HashMap<String, String> = HashMap::new();
    let mut out: Vec<Call> = Vec::new();
    let mut open = false;
    for line in lines {
        let Some((client, args)) = parse_line(line) else {
            continue;
        };
        if client == "lua" {
            if open {
                out.last_mut().expect("call").ran.push(args);
            }
            continue;
        }
        open = false;
        let cmd = String::from_utf8_lossy(&args[0]).to_uppercase();
        let source = |a: &[u8]| {
            let src = String::from_utf8_lossy(a).into_owned();
            (
                redis::Script::new(&src).get_hash().to_owned(),
                script_name(a),
            )
        };
        match cmd.as_str() {
            "SCRIPT" if args.len() > 2 && args[1].eq_ignore_ascii_case(b"load") => {
                let (sha, name) = source(&args[2]);
                names.insert(sha, name);
            }
            "FCALL" | "FCALL_RO" => {
                // `jobwire_<16 hex>_<script>`: named by the script.
                let f = String::from_utf8_lossy(&args[1]).into_owned();
                let label = f
                    .strip_prefix("jobwire_")
                    .and_then(|rest| rest.get(17..))
                    .unwrap_or(&f)
                    .to_owned();
                names.insert(f.clone(), label);
                let n: usize = String::from_utf8_lossy(&args[2]).parse().expect("numkeys");
                out.push(Call {
                    name: f,
                    keys: args[3..3 + n].to_vec(),
                    ran: Vec::new(),
                });
                open = true;
            }
            "EVAL" | "EVALSHA" | "EVAL_RO" | "EVALSHA_RO" => {
                // An EVALSHA refused with NOSCRIPT comes before the SCRIPT LOAD that
                // names it: names are looked up once the whole stream is read.
                let sha = if cmd.starts_with("EVALSHA") {
                    String::from_utf8_lossy(&args[1]).to_lowercase()
                } else {
                    let (sha, name) = source(&args[1]);
                    names.insert(sha.clone(), name);
                    sha
                };
                let n: usize = String::from_utf8_lossy(&args[2]).parse().expect("numkeys");
                out.push(Call {
                    name: sha,
                    keys: args[3..3 + n].to_vec(),
                    ran: Vec::new(),
                });
                open = true;
            }
            _ => {}
        }
    }
    for call in &mut out {
        if let Some(name) = names.get(&call.name) {
            call.name = name.clone();
        } else {
            call.name = format!("sha {}", call.name);
        }
    }
    out
}

/// The keys Redis finds in `cmd` (`COMMAND GETKEYS`; none for a command without keys).
pub(super) async fn keys_of(c: &mut RawConn, cmd: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let r: redis::RedisResult<Vec<Vec<u8>>> = redis::cmd("COMMAND")
        .arg("GETKEYS")
        .arg(cmd)
        .query_async(c)
        .await;
    match r {
        Ok(keys) => keys,
        Err(e) => {
            assert!(
                e.to_string().contains("no key arguments"),
                "COMMAND GETKEYS {:?}: {e}",
                String::from_utf8_lossy(&cmd[0])
            );
            Vec::new()
        }
    }
}

pub(super) fn show(k: &[u8]) -> String {
    String::from_utf8_lossy(k).into_owned()
}
