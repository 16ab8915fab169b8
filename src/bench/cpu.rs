//! CPU and memory readings from `/proc`, mirroring the BullMQ harness's `lib.mjs`: a
//! process's utime+stime, the whole box's busy time, and a process's resident set size.
//! Snapshots before and after a window turn into the harness's per-run figures.

use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};

/// Clock ticks per second of `/proc` times (`CLK_TCK`, 100 on Linux).
const TICKS: f64 = 100.0;

/// utime+stime of a process (all threads), in CPU-seconds; NaN when it cannot be read.
pub fn proc_cpu_sec(pid: &str) -> f64 {
    let Ok(s) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return f64::NAN;
    };
    // Fields after the command name (which may hold spaces) start at field 3 (state).
    let Some((_, rest)) = s.rsplit_once(") ") else {
        return f64::NAN;
    };
    let f: Vec<&str> = rest.split(' ').collect();
    let tick = |i: usize| {
        f.get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(f64::NAN)
    };
    (tick(11) + tick(12)) / TICKS
}

/// Whole-box busy and steal CPU-seconds from `/proc/stat` (busy = user+nice+system+irq+softirq).
pub fn box_cpu_sec() -> (f64, f64) {
    let s = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let v: Vec<f64> = s
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .skip(1)
        .map(|x| x.parse().unwrap_or(0.0))
        .collect();
    let at = |i: usize| v.get(i).copied().unwrap_or(0.0);
    (
        (at(0) + at(1) + at(2) + at(5) + at(6)) / TICKS,
        at(7) / TICKS,
    )
}

/// Resident set size of a process in bytes (`VmRSS`), if readable.
pub fn rss_bytes(pid: &str) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = s.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Which processes to watch: the server, Redis, and this client.
#[derive(Clone, Debug, Default)]
pub struct Pids {
    /// The jobwire server (`--server-pid`).
    pub server: Option<String>,
    /// The Redis servers (`--redis-pid`, repeated for a cluster's masters); their CPU is summed.
    pub redis: Vec<String>,
}

/// utime+stime of all `pids` together, CPU-seconds; NaN when there is none or one cannot be
/// read (a partial sum would pass for a figure).
fn sum_cpu(pids: &[String]) -> f64 {
    if pids.is_empty() {
        return f64::NAN;
    }
    pids.iter().map(|p| proc_cpu_sec(p)).sum()
}

/// One reading of every clock at an instant.
#[derive(Clone, Copy, Debug)]
pub struct Snap {
    t: Instant,
    redis: f64,
    server: f64,
    client: f64,
    busy: f64,
    steal: f64,
}

impl Pids {
    /// Reads every clock now.
    pub fn snap(&self) -> Snap {
        let read = |p: &Option<String>| p.as_deref().map_or(f64::NAN, proc_cpu_sec);
        let (busy, steal) = box_cpu_sec();
        Snap {
            t: Instant::now(),
            redis: sum_cpu(&self.redis),
            server: read(&self.server),
            client: proc_cpu_sec("self"),
            busy,
            steal,
        }
    }
}

/// The harness's result of one window: `count` units of work between `a` and `b`, CPU as %
/// of one core. `nodeCpu` is the jobwire server (the process that runs the queue logic, as
/// Node does for BullMQ); this client's own CPU is `clientCpu`. `otherCpu` is what neither
/// used: other tenants of the box.
pub fn measure(a: &Snap, b: &Snap, count: f64) -> Map<String, Value> {
    let sec = b.t.duration_since(a.t).as_secs_f64().max(1e-9);
    let pct = |x: f64, y: f64| 100.0 * (y - x) / sec;
    let redis = pct(a.redis, b.redis);
    let server = pct(a.server, b.server);
    let client = pct(a.client, b.client);
    let boxed = pct(a.busy, b.busy);
    let known = [redis, server, client]
        .iter()
        .filter(|v| v.is_finite())
        .sum::<f64>();
    let num = |v: f64| if v.is_finite() { json!(v) } else { Value::Null };
    let mut m = Map::new();
    m.insert("value".into(), json!(count / sec));
    m.insert("sec".into(), json!(sec));
    m.insert("redisCpu".into(), num(redis));
    m.insert("nodeCpu".into(), num(server));
    m.insert("clientCpu".into(), num(client));
    m.insert("boxCpu".into(), num(boxed));
    m.insert("otherCpu".into(), num(boxed - known));
    m.insert("steal".into(), num(pct(a.steal, b.steal)));
    m
}

/// Waits up to `max` for a 1 s window in which the whole box is under 40 % of one core busy
/// (the harness's `waitForQuiet`); returns the last window's busy %.
pub async fn wait_for_quiet(max: Duration) -> f64 {
    let mut busy = 0.0;
    let mut waited = Duration::ZERO;
    while waited < max {
        let a = box_cpu_sec().0;
        tokio::time::sleep(Duration::from_secs(1)).await;
        busy = 100.0 * (box_cpu_sec().0 - a);
        if busy < 40.0 {
            return busy;
        }
        waited += Duration::from_secs(1);
    }
    if max > Duration::ZERO {
        eprintln!("  (box still {busy:.0}% busy after {max:?} wait, measuring anyway)");
    }
    busy
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_own_cpu_and_rss() {
        assert!(proc_cpu_sec("self").is_finite());
        assert!(rss_bytes("self").unwrap_or(0) > 0);
        assert!(proc_cpu_sec("0").is_nan());
        let p = Pids::default();
        let (a, b) = (p.snap(), p.snap());
        let m = measure(&a, &b, 10.0);
        assert!(m["redisCpu"].is_null());
        assert!(m["clientCpu"].is_number());
    }

    #[test]
    fn redis_cpu_is_the_sum_over_every_pid() {
        // A cluster's masters are one pid each: their CPU adds up. A pid that cannot be read
        // makes the figure unknown (NaN), never a partial sum.
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("spawn sleep");
        let own = proc_cpu_sec("self");
        let both = Pids {
            server: None,
            redis: vec!["self".into(), child.id().to_string()],
        };
        let twice = Pids {
            server: None,
            redis: vec!["self".into(), "self".into()],
        };
        let gone = Pids {
            server: None,
            redis: vec!["self".into(), "0".into()],
        };
        assert!(both.snap().redis >= own);
        assert!(twice.snap().redis >= 2.0 * own);
        assert!(gone.snap().redis.is_nan());
        assert!(Pids::default().snap().redis.is_nan());
        let _ = child.kill();
        let _ = child.wait();
    }
}
