//! `jobwire bench`: builds the plan from the flags, runs every scenario `--runs` times
//! (interleaved), redoes noisy runs, prints the table and writes the JSON.

use std::time::Duration;

use serde_json::{json, Map, Value};

use super::args::BenchArgs;
use super::client::{connect, exponential_backoff, fresh_queues, prefill, SpecOpts};
use super::cpu::{measure, wait_for_quiet, Pids};
use super::nodes::Nodes;
use super::report::{document, render, render_nodes, Scenario};
use super::{enqueue, latency, rate, workers};

/// One entry of the plan.
#[derive(Clone, Debug)]
enum Plan {
    Sequential,
    Concurrent,
    Batch,
    EndToEnd(usize, u32, bool),
    Latency,
    Failure,
    Rss,
    Fill,
    /// Fixed-rate load: jobs/s, seconds, (workers, credits).
    Rate(u32, u64, (usize, u32)),
    /// A drain of pre-filled jobs: (workers, credits).
    Drain((usize, u32)),
    /// Bare gRPC health checks, this many in flight.
    HealthRtt(usize),
    /// A bare Redis PING, one at a time (needs `--redis-url`).
    RedisRtt,
}

/// A scenario to run: its name, its unit and what it runs.
type Step = (String, &'static str, Plan);

/// The scenarios to run, and notes on the ones left out (printed under the table).
fn plan(a: &BenchArgs) -> Result<(Vec<Step>, Vec<String>), String> {
    let mut p = Vec::new();
    let mut skipped = Vec::new();
    if a.wants("enqueue") {
        p.push((
            "enqueue: add() sequential".into(),
            "jobs/s",
            Plan::Sequential,
        ));
        let name = if a.in_flight == 50 {
            "enqueue: add() x50 concurrent producers".to_owned()
        } else {
            format!("enqueue: unary x{} in flight", a.in_flight)
        };
        p.push((name, "jobs/s", Plan::Concurrent));
        let name = format!("enqueue: addBulk({})", a.batch);
        p.push((name, "jobs/s", Plan::Batch));
    }
    if a.wants("e2e") {
        let configs = a.e2e_configs()?;
        for policy in [false, true] {
            if policy && !a.with_retry_policy {
                continue;
            }
            for &(w, c) in &configs {
                let name = match (w, policy) {
                    (1, false) => format!("e2e: worker concurrency {c}"),
                    (1, true) => format!("e2e: concurrency {c}, attempts 3 + exp backoff"),
                    (_, false) => format!("e2e: {w} workers x {c} credits"),
                    (_, true) => {
                        format!("e2e: {w} workers x {c} credits, attempts 3 + exp backoff")
                    }
                };
                p.push((name, "jobs/s", Plan::EndToEnd(w, c, policy)));
            }
        }
    }
    if a.wants("latency") {
        let name = format!(
            "latency: enqueue->handler start, idle worker c={}, {} jobs, {} ms gap",
            a.credits, a.latency_jobs, a.gap_ms
        );
        p.push((name, "ms p50", Plan::Latency));
    }
    if a.wants("failure") {
        let k = a.failure_jobs / 1000;
        let name = format!(
            "failure: {k}k jobs x 3 attempts, fixed backoff 0 ms, c={}",
            a.credits
        );
        p.push((name, "attempts/s", Plan::Failure));
    }
    if a.wants("rss") && a.server_pid.is_none() {
        skipped.push(
            "server RSS: skipped, it reads the server's memory from /proc and needs --server-pid"
                .to_owned(),
        );
    } else if a.wants("rss") {
        let name = format!(
            "server RSS: {} jobs leased across {} streams",
            a.rss_streams * a.rss_credits as usize,
            a.rss_streams
        );
        p.push((name, "MB", Plan::Rss));
    }
    if a.wants("rtt") {
        p.push((
            "rtt: grpc health check sequential".into(),
            "calls/s",
            Plan::HealthRtt(1),
        ));
        if a.in_flight > 1 {
            let name = format!("rtt: grpc health check x{} in flight", a.in_flight);
            p.push((name, "calls/s", Plan::HealthRtt(a.in_flight)));
        }
        if a.redis_url.is_some() {
            p.push((
                "rtt: redis PING sequential".into(),
                "calls/s",
                Plan::RedisRtt,
            ));
        } else {
            skipped.push("rtt: the Redis round trip needs --redis-url".to_owned());
        }
    }
    if a.wants("fill") {
        let name = format!("fill: {} waiting jobs, {}-byte payload", a.n, a.payload);
        p.push((name, "jobs/s", Plan::Fill));
    }
    if a.wants("rate") {
        let w = a.drain_config()?;
        for &rate in &a.rates {
            let name = format!("fixed rate: {rate} jobs/s for {} s", a.rate_secs);
            p.push((name, "jobs/s", Plan::Rate(rate, a.rate_secs, w)));
        }
    }
    if a.wants("drain") {
        let w = a.drain_config()?;
        let name = format!("drain: {} pre-filled jobs", a.drain_jobs);
        p.push((name, "jobs/s", Plan::Drain(w)));
        if a.redis_url.is_none() {
            skipped.push("drain: Redis memory before and after needs --redis-url".to_owned());
        }
    }
    if p.is_empty() {
        return Err(match skipped.pop() {
            Some(why) => format!("no scenario to run ({why})"),
            None => "--only selects no scenario".into(),
        });
    }
    Ok((p, skipped))
}

/// Queues a scenario spreads its jobs over (the latency probe and the RSS scenario use one).
fn queue_count(a: &BenchArgs, what: &Plan) -> usize {
    match what {
        Plan::Latency | Plan::Rss => 1,
        _ => a.queues,
    }
}

/// Jobs a scenario creates (the unit of the per-master Redis CPU figures).
fn job_count(a: &BenchArgs, what: &Plan) -> usize {
    match what {
        Plan::Latency => a.latency_jobs,
        Plan::Failure => a.failure_jobs,
        Plan::Rss => a.rss_streams * a.rss_credits as usize,
        Plan::Rate(rate, secs, _) => (u64::from(*rate) * *secs) as usize,
        Plan::Drain(_) => a.drain_jobs,
        _ => a.n,
    }
}

async fn run_one(
    a: &BenchArgs,
    ch: &crate::bench::client::Conn,
    pids: &Pids,
    what: &Plan,
    queues: &[String],
    nodes: Option<&mut Nodes>,
) -> anyhow::Result<Map<String, Value>> {
    let o = SpecOpts {
        payload: a.payload,
        groups: a.groups,
        ..Default::default()
    };
    match *what {
        Plan::Sequential => enqueue::sequential(ch, pids, a.n, queues, &o).await,
        Plan::Concurrent => enqueue::concurrent(ch, pids, a.n, a.in_flight, queues, &o).await,
        Plan::Batch => enqueue::batched(ch, pids, a.n, a.batch, queues, &o).await,
        Plan::EndToEnd(w, c, policy) => {
            let o = if policy {
                SpecOpts {
                    max_attempts: Some(3),
                    backoff: Some(exponential_backoff()),
                    ..o
                }
            } else {
                o
            };
            workers::end_to_end(ch, pids, a.n, (w, c), queues, &o, nodes).await
        }
        Plan::Latency => {
            let gap = Duration::from_millis(a.gap_ms);
            latency::idle_pickup(ch, pids, a.latency_jobs, gap, a.credits, queues, &o).await
        }
        Plan::Failure => {
            workers::failure_path(ch, pids, a.failure_jobs, a.credits, queues, a.payload).await
        }
        Plan::Rss => {
            workers::rss(
                &a.target()?,
                pids,
                a.rss_streams,
                a.rss_credits,
                queues,
                a.payload,
            )
            .await
        }
        Plan::Rate(rate, secs, w) => rate::fixed_rate(ch, pids, (rate, secs), w, queues, &o).await,
        Plan::Drain(w) => workers::drain(ch, pids, a.drain_jobs, w, queues, &o, nodes).await,
        Plan::HealthRtt(k) => enqueue::health_checks(ch, pids, a.n, k).await,
        Plan::RedisRtt => match nodes {
            Some(nodes) => enqueue::redis_pings(nodes, pids, a.n).await,
            None => anyhow::bail!("the Redis round trip needs --redis-url"),
        },
        Plan::Fill => {
            // Waiting jobs left in place, for measuring Redis memory per waiting job.
            let s = pids.snap();
            prefill(ch, queues, a.n, a.batch, &o).await?;
            Ok(measure(&s, &pids.snap(), a.n as f64))
        }
    }
}

/// Runs one scenario; with `--redis-url`, on queues placed evenly over the masters and with
/// every master's `INFO cpu` read before and after the whole scenario (pre-fill included:
/// for end-to-end that is a job's whole lifecycle, enqueue + lease + ack), recorded in the
/// run as `redisNodes: [{ addr, cpuSec, jobs }]` (`jobs`: of this scenario's jobs, those on
/// that master's queues; job i goes to queue i mod Q).
async fn run_measured(
    a: &BenchArgs,
    ch: &crate::bench::client::Conn,
    pids: &Pids,
    nodes: &mut Option<Nodes>,
    what: &Plan,
) -> anyhow::Result<Map<String, Value>> {
    let fresh = fresh_queues(queue_count(a, what));
    let Some(nodes) = nodes else {
        return run_one(a, ch, pids, what, &fresh, None).await;
    };
    let queues = nodes.placed(fresh).await?;
    let mut jobs = vec![0usize; nodes.masters.len()];
    let mut owner = Vec::with_capacity(queues.len());
    for q in &queues {
        owner.push(nodes.master_of(q).await?);
    }
    for i in 0..job_count(a, what) {
        jobs[owner[i % owner.len()]] += 1;
    }
    let before = nodes.cpu_sec().await;
    let mut r = run_one(a, ch, pids, what, &queues, Some(&mut *nodes)).await?;
    let after = nodes.cpu_sec().await;
    let list: Vec<Value> = nodes
        .masters
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let cpu = after[i] - before[i];
            let cpu = if cpu.is_finite() {
                json!(cpu)
            } else {
                Value::Null
            };
            json!({ "addr": m.addr, "cpuSec": cpu, "jobs": jobs[i] })
        })
        .collect();
    r.insert("redisNodes".into(), Value::Array(list));
    Ok(r)
}

/// Runs the bench described by `a` against a running server. A scenario that fails stops
/// the run, but the table (and the JSON) of what was measured until then is still written
/// before the error is returned.
pub async fn run(a: BenchArgs) -> anyhow::Result<()> {
    let (plan, mut notes) = plan(&a).map_err(anyhow::Error::msg)?;
    if a.n == 0
        || a.latency_jobs == 0
        || a.failure_jobs == 0
        || a.batch == 0
        || a.queues == 0
        || a.drain_jobs == 0
        || a.rate_secs == 0
        || a.rates.contains(&0)
    {
        anyhow::bail!(
            "-n, --latency-jobs, --failure-jobs, --batch, --queues, --drain-jobs, --rate-secs \
             and every --rates value must be > 0"
        );
    }
    let pids = Pids {
        server: a.server_pid.map(|p| p.to_string()),
        redis: a.redis_pid.iter().map(|p| p.to_string()).collect(),
    };
    let target = a.target()?;
    let ch = connect(&target).await?;
    let mut nodes = match &a.redis_url {
        Some(url) => Some(Nodes::discover(url).await?),
        None => None,
    };
    let mut results: Vec<Scenario> = plan
        .iter()
        .map(|(name, unit, _)| Scenario {
            name: name.clone(),
            unit,
            runs: Vec::new(),
        })
        .collect();
    let mut failed = None;
    'runs: for run in 1..=a.runs.max(1) {
        for (i, (name, _, what)) in plan.iter().enumerate() {
            let mut attempt = 0;
            let r = loop {
                wait_for_quiet(Duration::from_secs(a.quiet_wait)).await;
                let mut r = match run_measured(&a, &ch, &pids, &mut nodes, what).await {
                    Ok(r) => r,
                    Err(e) => {
                        notes.push(format!("{name}: failed in run {run}, stopped here: {e:#}"));
                        failed = Some(e);
                        break 'runs;
                    }
                };
                let other = r.get("otherCpu").and_then(Value::as_f64).unwrap_or(0.0);
                let noisy = other > a.max_other;
                r.insert("noisy".into(), json!(noisy));
                let f = |k: &str| r.get(k).and_then(Value::as_f64).unwrap_or(f64::NAN);
                eprintln!(
                    "[run {run}] {name}: {:.2} (redis {:.0}% server {:.0}% client {:.0}% other {:.0}%){}",
                    f("value"),
                    f("redisCpu"),
                    f("nodeCpu"),
                    f("clientCpu"),
                    other,
                    if noisy { " NOISY" } else { "" }
                );
                if !noisy || attempt >= a.retries {
                    break r;
                }
                attempt += 1;
            };
            results[i].runs.push(r);
        }
    }
    let title = format!(
        "jobwire {} against {}, label \"{}\", N={}, payload {} B, {} queue(s), median of {} run(s); \
         \"server\" = the jobwire server process (BullMQ's \"node\" column)",
        env!("CARGO_PKG_VERSION"),
        a.server,
        a.label,
        a.n,
        a.payload,
        a.queues,
        a.runs.max(1)
    );
    println!("{}", render(&title, &results));
    if let Some(nodes) = &nodes {
        let addrs: Vec<&str> = nodes.masters.iter().map(|m| m.addr.as_str()).collect();
        println!("\n{}", render_nodes(&addrs, &results));
    }
    for note in &notes {
        println!("\nNote: {note}");
    }
    if let Some(path) = &a.json {
        let meta = json!({
            "label": a.label, "n": a.n, "runs": a.runs.max(1), "maxOther": a.max_other,
            "system": "jobwire", "version": env!("CARGO_PKG_VERSION"), "payload": a.payload,
            "queues": a.queues, "title": title,
            "clientWorkerThreads": a.runtime.worker_threads,
        });
        let doc = document(meta, &results);
        std::fs::write(path, serde_json::to_string_pretty(&doc)?)?;
    }
    failed.map_or(Ok(()), Err)
}
