//! Flags of `jobwire bench`.

use std::path::PathBuf;

use clap::Args;

/// Settings of `jobwire bench`: which scenarios, how big, and which processes to watch.
#[derive(Clone, Debug, Args)]
pub struct BenchArgs {
    /// The jobwire server to load (gRPC endpoint).
    #[arg(long, default_value = "http://127.0.0.1:50051")]
    pub server: String,

    /// Pid of the server, for its CPU (utime+stime from /proc) and RSS; without it the RSS
    /// scenario is skipped (with a note under the table).
    #[arg(long)]
    pub server_pid: Option<u32>,

    /// Pid of the Redis the server uses, for its CPU; repeat it for each master of a Redis
    /// Cluster (their CPU is summed).
    #[arg(long)]
    pub redis_pid: Vec<u32>,

    /// The Redis of the server under test, as the server's own `--redis-url`: `redis://`,
    /// `rediss://`, `redis+unix://`, or `redis+cluster://h1:p1,h2:p2,...` (seeds; every
    /// master is found with CLUSTER NODES). With it the bench reads each master's CPU
    /// (`INFO cpu`: used_cpu_sys + used_cpu_user) before and after every scenario, places
    /// the queues of a scenario evenly over the masters (by the hash slot of `{queue}`), and
    /// prints Redis CPU µs per job for each master, the total, max/min and the ceiling
    /// masters x 1 core / CPU per job.
    #[arg(long)]
    pub redis_url: Option<String>,

    /// Scenario groups to run: enqueue, e2e, latency, failure, rss, fill, rtt (the floors
    /// under unary Enqueue: a bare gRPC health check one at a time and `--in-flight` at a
    /// time, and with `--redis-url` a bare Redis PING one at a time), and (not by
    /// default: they take minutes) rate (fixed-rate load, `--rates`) and drain (a drain
    /// of `--drain-jobs` pre-filled jobs).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "enqueue,e2e,latency,failure,rss"
    )]
    pub only: Vec<String>,

    /// Rounds of every scenario (interleaved: round 1 of all, then round 2, ...).
    #[arg(long, default_value_t = 1)]
    pub runs: usize,

    /// Jobs per enqueue and end-to-end scenario (N); also the jobs of `fill`.
    #[arg(long, short = 'n', default_value_t = 50_000)]
    pub n: usize,

    /// End-to-end worker configurations, each WORKERSxCREDITS (W streams with C credits).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "1x1,1x16,1x100,4x64,2x256"
    )]
    pub e2e: Vec<String>,

    /// Also run each end-to-end configuration with jobs that carry max_attempts 3 and an
    /// exponential backoff (no job fails: options only), as the BullMQ harness does.
    #[arg(long)]
    pub with_retry_policy: bool,

    /// Unary Enqueue calls in flight in the concurrent enqueue scenario.
    #[arg(long, default_value_t = 64)]
    pub in_flight: usize,

    /// Jobs per EnqueueBatch call.
    #[arg(long, default_value_t = 1000)]
    pub batch: usize,

    /// Payload bytes per job.
    #[arg(long, default_value_t = 16)]
    pub payload: usize,

    /// Queues the jobs of a scenario are spread over (round-robin); workers serve them all.
    #[arg(long, default_value_t = 1)]
    pub queues: usize,

    /// Group keys the jobs of a scenario are spread over (job i gets group `g<i mod N>`,
    /// so every group has waiting jobs while the backlog lasts); 0: no group key (the
    /// queue's default group). Measures the cost of the lease's turns across groups.
    #[arg(long, default_value_t = 0)]
    pub groups: usize,

    /// Rates of the fixed-rate scenario, unary Enqueue calls per second (one run each).
    #[arg(long, value_delimiter = ',', default_value = "100,1000,5000")]
    pub rates: Vec<u32>,

    /// Seconds each fixed rate is held.
    #[arg(long, default_value_t = 10)]
    pub rate_secs: u64,

    /// Worker streams of the fixed-rate and drain scenarios, WORKERSxCREDITS.
    #[arg(long, default_value = "2x256")]
    pub drain_workers: String,

    /// Jobs pre-filled for the drain scenario.
    #[arg(long, default_value_t = 1_000_000)]
    pub drain_jobs: usize,

    /// Jobs of the latency probe (enqueued one at a time with --gap-ms between).
    #[arg(long, default_value_t = 2000)]
    pub latency_jobs: usize,

    /// Pause after each enqueue of the latency probe, ms.
    #[arg(long, default_value_t = 2)]
    pub gap_ms: u64,

    /// Credits of the idle worker of the latency probe, and of each failure-path worker.
    #[arg(long, default_value_t = 16)]
    pub credits: u32,

    /// Jobs of the failure path (each fails RETRY with zero backoff until dead, 3 attempts).
    #[arg(long, default_value_t = 10_000)]
    pub failure_jobs: usize,

    /// Streams of the RSS scenario (jobs leased = streams x --rss-credits).
    #[arg(long, default_value_t = 1000)]
    pub rss_streams: usize,

    /// Credits per stream of the RSS scenario.
    #[arg(long, default_value_t = 10)]
    pub rss_credits: u32,

    /// Before each measurement, wait up to this many seconds for the box to be quiet.
    #[arg(long, default_value_t = 0)]
    pub quiet_wait: u64,

    /// Redo a run when other tenants used more than this % of a core during it.
    #[arg(long, default_value_t = 25.0)]
    pub max_other: f64,

    /// How many times a noisy run is redone.
    #[arg(long, default_value_t = 0)]
    pub retries: usize,

    /// Label written into the JSON meta.
    #[arg(long, default_value = "plain")]
    pub label: String,

    /// Write the results as JSON in the BullMQ harness's shape (for `report.mjs --compare`).
    #[arg(long)]
    pub json: Option<PathBuf>,

    /// Connect over TLS, trusting the CA certificates of this PEM file for the server's
    /// certificate (an `http://` --server is taken as `https://`).
    #[arg(long, value_name = "FILE")]
    pub tls_ca: Option<PathBuf>,

    /// Client certificate (PEM) for a server that requires one (mTLS; needs --tls-key and
    /// --tls-ca).
    #[arg(long, value_name = "FILE")]
    pub tls_cert: Option<PathBuf>,

    /// Private key (PEM) of --tls-cert.
    #[arg(long, value_name = "FILE")]
    pub tls_key: Option<PathBuf>,

    /// Name the server's certificate must carry (default: the host of --server).
    #[arg(long)]
    pub tls_server_name: Option<String>,

    /// Bearer token sent as `authorization: Bearer <token>` on every call. Never printed.
    #[arg(long, env = "JOBWIRE_TOKEN", hide_env_values = true)]
    pub token: Option<Secret>,

    /// The bench client's own async runtime (`--worker-threads`, as `serve` takes it).
    #[command(flatten)]
    pub runtime: crate::config::RuntimeArgs,
}

/// A secret flag value (a bearer token): `Debug` never shows it.
#[derive(Clone)]
pub struct Secret(pub String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

impl std::str::FromStr for Secret {
    type Err = std::convert::Infallible;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(Secret(s.to_owned()))
    }
}

impl BenchArgs {
    /// How to reach the server: --server with the --tls-* files read and --token.
    pub fn target(&self) -> anyhow::Result<crate::bench::client::Target> {
        crate::bench::client::Target::new(self)
    }

    /// Is scenario group `g` selected?
    pub fn wants(&self, g: &str) -> bool {
        self.only.iter().any(|o| o == g)
    }

    /// The parsed `--e2e` list: (workers, credits) pairs.
    pub fn e2e_configs(&self) -> Result<Vec<(usize, u32)>, String> {
        self.e2e.iter().map(|c| parse_workers(c)).collect()
    }

    /// The parsed `--drain-workers`.
    pub fn drain_config(&self) -> Result<(usize, u32), String> {
        parse_workers(&self.drain_workers)
    }
}

/// One WORKERSxCREDITS value (`--e2e`, `--drain-workers`).
fn parse_workers(c: &str) -> Result<(usize, u32), String> {
    let (w, k) = c
        .split_once('x')
        .ok_or_else(|| format!("{c}: expected WORKERSxCREDITS"))?;
    let w: usize = w.parse().map_err(|_| format!("{c}: bad workers"))?;
    let k: u32 = k.parse().map_err(|_| format!("{c}: bad credits"))?;
    if w == 0 || !(1..=10_000).contains(&k) {
        return Err(format!("{c}: workers >= 1, credits 1..=10000"));
    }
    Ok((w, k))
}
