//! Results: the markdown table printed at the end, and the JSON document in the BullMQ
//! harness's shape (`{ meta, scenarios: [{ name, unit, runs: [{ value, redisCpu, nodeCpu,
//! ... }] }] }`) that its `report.mjs --compare` reads.

use serde_json::{json, Map, Value};

/// One scenario and its runs.
pub struct Scenario {
    /// The harness's scenario name where one corresponds.
    pub name: String,
    /// Unit of `value` (`jobs/s`, `ms p50`, `attempts/s`, `MB`).
    pub unit: &'static str,
    /// One object per run.
    pub runs: Vec<Map<String, Value>>,
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.retain(|x| x.is_finite());
    if xs.is_empty() {
        return f64::NAN;
    }
    xs.sort_by(|a, b| a.total_cmp(b));
    let m = xs.len() / 2;
    if xs.len() % 2 == 1 {
        xs[m]
    } else {
        (xs[m - 1] + xs[m]) / 2.0
    }
}

fn field(r: &Map<String, Value>, k: &str) -> f64 {
    r.get(k).and_then(Value::as_f64).unwrap_or(f64::NAN)
}

/// Median of field `k` over the runs.
pub fn med(runs: &[Map<String, Value>], k: &str) -> f64 {
    median(runs.iter().map(|r| field(r, k)).collect())
}

/// Formats like the harness: thousands separators from 100 up, two decimals below.
pub fn fmt(x: f64) -> String {
    if !x.is_finite() {
        return "–".into();
    }
    if x.abs() < 100.0 {
        return format!("{x:.2}");
    }
    let s = format!("{}", x.round() as i64);
    let (sign, digits) = s.split_at(if s.starts_with('-') { 1 } else { 0 });
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    format!("{sign}{out}")
}

/// A CPU % as a whole number.
fn pct0(x: f64) -> String {
    if x.is_finite() {
        format!("{x:.0}")
    } else {
        "–".into()
    }
}

/// CPU µs of one core per unit of work in run `r` (CPU % x 10^4 / units per second).
fn us_per(r: &Map<String, Value>, k: &str) -> f64 {
    field(r, k) * 1e4 / field(r, "value")
}

fn notes(s: &Scenario) -> String {
    let r = &s.runs;
    if s.name.starts_with("latency") {
        return format!(
            "p90 {} ms, p95 {} ms, p99 {} ms, max {} ms; from the Enqueue reply: p50 {} / p99 {} / max {} ms; the Enqueue call: p50 {} / p99 {} ms",
            fmt(med(r, "p90")),
            fmt(med(r, "p95")),
            fmt(med(r, "p99")),
            fmt(med(r, "max")),
            fmt(med(r, "fromReturnP50")),
            fmt(med(r, "fromReturnP99")),
            fmt(med(r, "fromReturnMax")),
            fmt(med(r, "rpcP50")),
            fmt(med(r, "rpcP99"))
        );
    }
    if s.name.starts_with("failure") {
        let list = |k: &str| {
            r.iter()
                .map(|x| fmt(field(x, k)))
                .collect::<Vec<_>>()
                .join("/")
        };
        return format!(
            "{} jobs/s to final failure; attempts {}; dead count {}",
            fmt(med(r, "jobsPerSec")),
            list("attempts"),
            list("failedCount")
        );
    }
    if s.name.starts_with("server RSS") {
        return format!(
            "RSS before {} MB; {} leases held; {} bytes per lease",
            fmt(med(r, "rssBeforeMB")),
            fmt(med(r, "leased")),
            fmt(med(r, "bytesPerLease"))
        );
    }
    let workers = r
        .first()
        .and_then(|x| x.get("workers"))
        .and_then(Value::as_str)
        .unwrap_or("?");
    if s.name.starts_with("fixed rate") {
        return format!(
            "unary Enqueue, worker streams {workers} credits; enqueue->lease p50 {} / p95 {} / p99 {} / max {} ms; enqueue->ack p50 {} / p95 {} / p99 {} / max {} ms; late sends {}, Enqueue errors {}",
            fmt(med(r, "leaseP50")),
            fmt(med(r, "leaseP95")),
            fmt(med(r, "leaseP99")),
            fmt(med(r, "leaseMax")),
            fmt(med(r, "ackP50")),
            fmt(med(r, "ackP95")),
            fmt(med(r, "ackP99")),
            fmt(med(r, "ackMax")),
            fmt(med(r, "lateSends")),
            fmt(med(r, "enqueueErrors"))
        );
    }
    if s.name.starts_with("drain") {
        return format!(
            "worker streams {workers} credits; fill {} jobs/s (EnqueueBatch 1000); Redis used_memory before the fill {} MB, full {} MB, after the drain {} MB",
            fmt(med(r, "fillRate")),
            fmt(med(r, "memBeforeMB")),
            fmt(med(r, "memFullMB")),
            fmt(med(r, "memAfterMB"))
        );
    }
    if s.name.starts_with("e2e") {
        let left: Vec<String> = r
            .iter()
            .map(|run| run.get("leftInQueue").map_or("–".into(), Value::to_string))
            .collect();
        let mut note = format!(
            "refused settles {}; left in queue {}",
            fmt(med(r, "refused")),
            left.join("/")
        );
        if r.iter().any(|run| run.get("usedMemoryMB").is_some()) {
            note.push_str(&format!(
                "; Redis used_memory {} MB",
                fmt(med(r, "usedMemoryMB"))
            ));
        }
        return note;
    }
    String::new()
}

/// The markdown table of medians (server CPU in the harness's "node" column).
pub fn render(title: &str, scenarios: &[Scenario]) -> String {
    let mut lines = vec![
        title.to_owned(),
        String::new(),
        "| scenario | median | unit | runs | redis CPU % | server CPU % | bench client CPU % | other load % | redis µs/job | server µs/job | notes |".to_owned(),
        "|---|---:|---|---|---:|---:|---:|---:|---:|---:|---|".to_owned(),
    ];
    for s in scenarios {
        let cpu = !s.name.starts_with("latency") && !s.name.starts_with("server RSS");
        let per = |k: &str| {
            if cpu {
                median(s.runs.iter().map(|r| us_per(r, k)).collect())
            } else {
                f64::NAN
            }
        };
        let runs: Vec<String> = s.runs.iter().map(|r| fmt(field(r, "value"))).collect();
        lines.push(format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            s.name,
            fmt(med(&s.runs, "value")),
            s.unit,
            runs.join(", "),
            pct0(med(&s.runs, "redisCpu")),
            pct0(med(&s.runs, "nodeCpu")),
            pct0(med(&s.runs, "clientCpu")),
            pct0(med(&s.runs, "otherCpu")),
            fmt(per("redisCpu")),
            fmt(per("nodeCpu")),
            notes(s)
        ));
    }
    lines.join("\n")
}

/// Per-master Redis CPU of one run: (CPU-seconds, jobs on that master's queues) per
/// master, from the run's `redisNodes`.
fn nodes_of(r: &Map<String, Value>) -> Vec<(f64, f64)> {
    let list = r.get("redisNodes").and_then(Value::as_array);
    list.map_or_else(Vec::new, |l| {
        l.iter()
            .map(|n| {
                let f = |k: &str| n.get(k).and_then(Value::as_f64).unwrap_or(f64::NAN);
                (f("cpuSec"), f("jobs"))
            })
            .collect()
    })
}

/// The per-master figures of one run: total µs per job (all masters' CPU over all jobs),
/// µs per job each master served, CPU max/min over the masters, and the model ceiling.
///
/// The ceiling: at X jobs/s master m, serving a share s_m of the jobs at c_m µs each,
/// needs X s_m c_m µs of CPU per second; one core gives 10^6, so X <= 10^6 / (s_m c_m) =
/// jobs / cpu_m (cpu_m in seconds) for every master: the busiest master sets it. With
/// an even spread over M masters that is M x 10^6 / c (c: µs per job on one master).
fn node_figures(r: &Map<String, Value>) -> (f64, Vec<f64>, f64, f64) {
    let nodes = nodes_of(r);
    let jobs: f64 = nodes.iter().map(|n| n.1).sum();
    let cpu: Vec<f64> = nodes.iter().map(|n| n.0).collect();
    let total = cpu.iter().sum::<f64>() * 1e6 / jobs;
    let per = nodes
        .iter()
        .map(|&(c, j)| if j > 0.0 { c * 1e6 / j } else { f64::NAN })
        .collect();
    let max = cpu.iter().copied().fold(f64::NAN, f64::max);
    let min = cpu.iter().copied().fold(f64::NAN, f64::min);
    (total, per, max / min, jobs / max)
}

/// The per-master table (`--redis-url`): for each scenario, the medians over its runs of
/// Redis CPU µs per job summed over all masters, µs per job each master served (in the
/// order of `addrs`), the masters' CPU max/min, and the model's ceiling in jobs/s.
pub fn render_nodes(addrs: &[&str], scenarios: &[Scenario]) -> String {
    let mut lines = vec![
        format!(
            "Redis CPU per master (INFO cpu: used_cpu_sys + used_cpu_user, read before and after \
             each whole scenario, pre-fill included: for e2e a job's lifecycle enqueue + lease + ack). \
             Masters: {}. Ceiling = 1 core per master / CPU per job on the busiest master.",
            addrs.join(", ")
        ),
        String::new(),
        "| scenario | jobs | masters | Redis µs/job, all masters | µs per job served, per master | jobs per master | CPU max/min | ceiling jobs/s |".to_owned(),
        "|---|---:|---:|---:|---|---|---:|---:|".to_owned(),
    ];
    for s in scenarios {
        let Some(first) = s.runs.first() else {
            continue;
        };
        let figs: Vec<_> = s.runs.iter().map(node_figures).collect();
        let per_master: Vec<String> = (0..addrs.len())
            .map(|m| {
                fmt(median(
                    figs.iter()
                        .map(|f| f.1.get(m).copied().unwrap_or(f64::NAN))
                        .collect(),
                ))
            })
            .collect();
        let jobs: Vec<String> = nodes_of(first).iter().map(|n| n.1.to_string()).collect();
        let total_jobs: f64 = nodes_of(first).iter().map(|n| n.1).sum();
        lines.push(format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} |",
            s.name,
            total_jobs,
            addrs.len(),
            fmt(median(figs.iter().map(|f| f.0).collect())),
            per_master.join(" / "),
            jobs.join(" / "),
            fmt(median(figs.iter().map(|f| f.2).collect())),
            fmt(median(figs.iter().map(|f| f.3).collect())),
        ));
    }
    lines.join("\n")
}

/// The JSON document for `report.mjs`.
pub fn document(meta: Value, scenarios: &[Scenario]) -> Value {
    let list: Vec<Value> = scenarios
        .iter()
        .map(|s| json!({ "name": s.name, "unit": s.unit, "runs": s.runs }))
        .collect();
    json!({ "meta": meta, "scenarios": list })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_like_the_harness() {
        assert_eq!(fmt(1234567.4), "1,234,567");
        assert_eq!(fmt(100.0), "100");
        assert_eq!(fmt(0.466), "0.47");
        assert_eq!(fmt(-2500.0), "-2,500");
        assert_eq!(fmt(f64::NAN), "–");
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), 2.5);
    }

    #[test]
    fn per_master_figures_and_the_ceiling() {
        // 3 masters, 900 jobs, 300 each; the third spent twice the CPU of the others.
        let r = json!({ "redisNodes": [
            { "addr": "a", "cpuSec": 0.03, "jobs": 300 },
            { "addr": "b", "cpuSec": 0.03, "jobs": 300 },
            { "addr": "c", "cpuSec": 0.06, "jobs": 300 },
        ]});
        let (total, per, spread, ceiling) = node_figures(r.as_object().expect("object"));
        assert!((total - 133.333).abs() < 0.01, "{total}");
        assert!((per[0] - 100.0).abs() < 1e-6 && (per[2] - 200.0).abs() < 1e-6);
        assert!((spread - 2.0).abs() < 1e-9);
        // The busiest: 200 µs per job on a third of the jobs -> 3 x 10^6 / 200.
        assert!((ceiling - 15_000.0).abs() < 1e-6, "{ceiling}");
    }
}
