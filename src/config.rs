//! Command-line and environment configuration (clap derive).
//!
//! Every flag has a `JOBWIRE_*` environment twin, durations parse with humantime (`25s`, `500ms`),
//! and [`ServeArgs::validate`] checks ranges before anything binds, so a bad value fails at start
//! with a clear message instead of misbehaving later. Tests build [`ServeArgs::for_tests`] directly
//! rather than touching the process environment.
//!
//! Invariant: the Redis URL may carry a password, so `Debug` (used by `--print-config` and logs)
//! redacts it, and `--help` never shows the environment value of `JOBWIRE_REDIS_URL`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

mod abuse;
mod auth;
pub mod conn;
mod redact;
mod replica;
mod request_memory;
mod runtime;
mod tls;
mod ui;

pub use abuse::AbuseArgs;
pub use auth::AuthArgs;
pub use conn::ConnArgs;
pub use redact::redact_url;
pub use replica::ReplicaArgs;
pub use request_memory::RequestMemoryArgs;
pub use runtime::{RuntimeArgs, MAX_WORKER_THREADS};
pub use tls::TlsArgs;
pub use ui::UiArgs;

/// Largest value of `--max-payload-bytes` (64 MiB). The gRPC message limit follows the flag
/// (`api::max_message_bytes`); Redis itself takes strings up to 512 MB, but one job this size
/// already costs a lease script call and its replies tens of milliseconds.
pub const MAX_PAYLOAD_LIMIT: usize = 64 << 20;

/// Largest value of `--max-checkpoint-bytes` and `--max-result-bytes` (1 MiB). A checkpoint
/// rides in every lease of its job and both come back in GetJob, so larger resume state
/// belongs in the worker's own storage, named by the checkpoint. 1 MiB also keeps a
/// ReportProgress within the gRPC message limit at any `--max-payload-bytes`.
pub const MAX_DATA_LIMIT: usize = 1 << 20;

/// Top-level command line of the `jobwire` binary.
#[derive(Debug, Parser)]
#[command(name = "jobwire", version, about)]
pub struct Cli {
    /// The subcommand to run.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands; an enum so later tools (e.g. `bench`) slot in beside `serve`.
// Parsed once per process and matched at once: the size of the `serve` variant (every
// flag) costs nothing, and boxing it would only add indirection to every caller.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the gRPC job server (and the HTTP metrics/health port).
    Serve(ServeArgs),
    /// Load a running server and report throughput, latency and CPU per job.
    Bench(crate::bench::BenchArgs),
    /// The operator commands (`queues`, `jobs`, `dlq`, `workers`, `token`): gRPC clients
    /// of a running server (see docs/cli.md).
    #[command(flatten)]
    Operator(crate::cli::Command),
}

/// `appendfsync` policy for the embedded Redis: the durability/throughput trade-off.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Fsync {
    /// fsync after every write: no loss on power failure, slowest.
    Always,
    /// fsync once a second: at most about one second of writes lost on power failure.
    Everysec,
    /// Leave flushing to the OS.
    No,
}

impl Fsync {
    /// The value Redis expects for `--appendfsync`.
    pub fn as_str(self) -> &'static str {
        match self {
            Fsync::Always => "always",
            Fsync::Everysec => "everysec",
            Fsync::No => "no",
        }
    }
}

/// Log output format: human-readable for terminals, JSON for log pipelines.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Pretty,
    /// One JSON object per event.
    Json,
}

/// Settings of `jobwire serve`. Build with clap, or with [`ServeArgs::for_tests`] in tests.
#[derive(Clone, Args)]
pub struct ServeArgs {
    /// Address the gRPC server listens on. A non-loopback address needs --auth-file (or
    /// --insecure).
    #[arg(long, env = "JOBWIRE_GRPC_ADDR", default_value = "127.0.0.1:50051")]
    pub grpc_addr: SocketAddr,

    /// Address of the HTTP port (/metrics, /healthz, /readyz, and /ui with --ui).
    #[arg(long, env = "JOBWIRE_HTTP_ADDR", default_value = "0.0.0.0:9090")]
    pub http_addr: SocketAddr,

    /// Existing Redis to use; without it an embedded redis-server is started in --data-dir.
    /// One Redis: redis://[user:pass@]host:port[/db], rediss:// (TLS), redis+unix:///path.
    /// Redis Cluster: redis+cluster://[user:pass@]h1:p1,h2:p2,... (any nodes as seeds;
    /// rediss+cluster:// for TLS). Sentinel: redis+sentinel://[user:pass@]s1:p1,s2:p2/<master>
    /// (the credentials are the data nodes'; sentinels are asked without any).
    #[arg(long, env = "JOBWIRE_REDIS_URL", hide_env_values = true)]
    pub redis_url: Option<String>,

    /// Directory for the embedded Redis (socket, append-only file, log).
    #[arg(long, env = "JOBWIRE_DATA_DIR", default_value = "./jobwire-data")]
    pub data_dir: PathBuf,

    /// appendfsync policy of the embedded Redis.
    #[arg(
        long,
        env = "JOBWIRE_REDIS_FSYNC",
        value_enum,
        default_value = "everysec"
    )]
    pub redis_fsync: Fsync,

    /// Accept a Redis whose maxmemory-policy may evict keys (jobs could silently vanish).
    /// Without it jobwire refuses to start on such a Redis, and refuses new jobs
    /// (UNAVAILABLE, REDIS_EVICTS) while the policy is switched to one at run time.
    #[arg(long, env = "JOBWIRE_ALLOW_EVICTION")]
    pub allow_eviction: bool,

    /// How long shutdown waits for in-flight work before exiting anyway.
    #[arg(long, env = "JOBWIRE_SHUTDOWN_GRACE", default_value = "25s", value_parser = humantime::parse_duration)]
    pub shutdown_grace: Duration,

    /// Default lease length of a delivered job (1s..=1h).
    #[arg(long, env = "JOBWIRE_LEASE_DURATION", default_value = "30s", value_parser = humantime::parse_duration)]
    pub lease_duration: Duration,

    /// A worker stream silent for this long is considered dead: its leases are no longer
    /// renewed, and a stream that holds leases is ended (UNAVAILABLE); a stream that sent no
    /// `open` is ended after it too (30s at most). An idle worker, holding nothing, may stay
    /// silent.
    #[arg(long, env = "JOBWIRE_HEARTBEAT_TIMEOUT", default_value = "60s", value_parser = humantime::parse_duration)]
    pub heartbeat_timeout: Duration,

    /// How often expired leases are reclaimed and due delayed jobs promoted (10ms..=60s).
    #[arg(long, env = "JOBWIRE_REAPER_INTERVAL", default_value = "1s", value_parser = humantime::parse_duration)]
    pub reaper_interval: Duration,

    /// Registered queues the reaper's safety sweep visits per second whatever the due index
    /// says (0..=1000; 0 turns the sweep off). It repairs due-index updates lost to a Redis
    /// error; a full sweep of N queues takes N / rate seconds.
    #[arg(long, env = "JOBWIRE_REAPER_SWEEP_RATE", default_value_t = crate::lease::DEFAULT_SWEEP_RATE)]
    pub reaper_sweep_rate: u32,

    /// Timeout of every Redis command (10ms..=60s): a stalled Redis turns into UNAVAILABLE,
    /// never a hang. A call that timed out may still run in Redis later; jobwire makes that
    /// safe (see README, "Lost replies").
    #[arg(long, env = "JOBWIRE_REDIS_TIMEOUT", default_value = "3s", value_parser = humantime::parse_duration)]
    pub redis_timeout: Duration,

    /// Replicas that must acknowledge each write before jobwire answers (Redis WAIT after
    /// every call that changes job state; 0..=16, 0: asynchronous replication, the Redis
    /// default). With N >= 1 an acknowledged Enqueue or Ack survives the loss of the master,
    /// at a cost in throughput (README, "Redis deployments"). A write not acknowledged in
    /// --redis-wait-timeout answers UNAVAILABLE (it is safe to retry).
    #[arg(long, env = "JOBWIRE_REDIS_WAIT_REPLICAS", default_value_t = 0)]
    pub redis_wait_replicas: u32,

    /// How long a write waits for --redis-wait-replicas (1ms..; less than --redis-timeout).
    #[arg(long, env = "JOBWIRE_REDIS_WAIT_TIMEOUT", default_value = "1s", value_parser = humantime::parse_duration)]
    pub redis_wait_timeout: Duration,

    /// Deadline of a unary RPC.
    #[arg(long, env = "JOBWIRE_REQUEST_TIMEOUT", default_value = "30s", value_parser = humantime::parse_duration)]
    pub request_timeout: Duration,

    /// Largest accepted job payload in bytes (at most 67108864 = 64 MiB). gRPC messages may be
    /// up to a full batch of such payloads (at most 64 MiB) + 1 MiB.
    #[arg(long, env = "JOBWIRE_MAX_PAYLOAD_BYTES", default_value_t = 1_048_576)]
    pub max_payload_bytes: usize,

    /// Largest checkpoint a worker may save with ReportProgress, in bytes (1..=1048576); a
    /// larger one is refused with RESOURCE_EXHAUSTED. Each lease of the job carries it.
    #[arg(long, env = "JOBWIRE_MAX_CHECKPOINT_BYTES", default_value_t = 65_536)]
    pub max_checkpoint_bytes: usize,

    /// Largest result a worker may attach to an Ack, in bytes (1..=1048576); a larger one is
    /// refused with RESOURCE_EXHAUSTED and the job stays leased.
    #[arg(long, env = "JOBWIRE_MAX_RESULT_BYTES", default_value_t = 65_536)]
    pub max_result_bytes: usize,

    /// max_attempts of jobs enqueued without a retry policy (1..=1000).
    #[arg(long, env = "JOBWIRE_DEFAULT_MAX_ATTEMPTS", default_value_t = 1)]
    pub default_max_attempts: u32,

    /// Distinct job_name label values per queue in metrics; later names are reported as
    /// "other" (1..=10000).
    #[arg(long, env = "JOBWIRE_METRICS_MAX_JOB_NAMES", default_value_t = 100)]
    pub metrics_max_job_names: usize,

    /// Distinct queue label values in metrics; later queues are reported as "other"
    /// (1..=10000).
    #[arg(long, env = "JOBWIRE_METRICS_MAX_QUEUES", default_value_t = crate::metrics::labels::DEFAULT_MAX_QUEUES)]
    pub metrics_max_queues: usize,

    /// Most queues the server keeps (1..=1000000): an Enqueue, EnqueueBatch or queue admin
    /// call that would create one more is refused with RESOURCE_EXHAUSTED. DeleteQueue frees
    /// a slot.
    #[arg(long, env = "JOBWIRE_MAX_QUEUES", default_value_t = crate::store::DEFAULT_MAX_QUEUES)]
    pub max_queues: usize,

    /// Queue config file (TOML: defaults, retention, rate limits, concurrency limits per
    /// queue), applied to Redis at start.
    #[arg(long, env = "JOBWIRE_CONFIG")]
    pub config: Option<PathBuf>,

    /// Log output format.
    #[arg(long, env = "JOBWIRE_LOG_FORMAT", value_enum, default_value = "pretty")]
    pub log_format: LogFormat,

    /// Print the effective configuration (secrets redacted) and exit.
    #[arg(long)]
    pub print_config: bool,

    /// TLS of the gRPC port.
    #[command(flatten)]
    pub tls: TlsArgs,

    /// Authentication and authorization.
    #[command(flatten)]
    pub auth: AuthArgs,

    /// Abuse limits of the gRPC port.
    #[command(flatten)]
    pub abuse: AbuseArgs,
    /// Connection deadlines and caps of both ports.
    #[command(flatten)]
    pub conn: ConnArgs,
    /// The gRPC port's budget of buffered request bytes.
    #[command(flatten)]
    pub request_memory: RequestMemoryArgs,

    /// This replica's id and worker-stream reports (ListWorkers).
    #[command(flatten)]
    pub replica: ReplicaArgs,
    /// The web dashboard (`--ui`).
    #[command(flatten)]
    pub ui: UiArgs,
    /// The async runtime's threads (`--worker-threads`).
    #[command(flatten)]
    pub runtime: RuntimeArgs,
}

impl ServeArgs {
    /// The `--redis-wait-replicas` setting for the store.
    pub fn wait_replicas(&self) -> crate::store::WaitReplicas {
        crate::store::WaitReplicas {
            replicas: self.redis_wait_replicas,
            timeout: self.redis_wait_timeout,
        }
    }

    /// Settings for tests: loopback ports chosen by the OS, the given Redis, short timings.
    /// Tests mutate the returned value instead of going through clap or the environment.
    pub fn for_tests(redis_url: impl Into<String>) -> Self {
        Self {
            grpc_addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            http_addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            redis_url: Some(redis_url.into()),
            data_dir: PathBuf::from("./jobwire-data"),
            redis_fsync: Fsync::Everysec,
            allow_eviction: false,
            shutdown_grace: Duration::from_secs(2),
            lease_duration: Duration::from_secs(2),
            heartbeat_timeout: Duration::from_secs(10),
            reaper_interval: Duration::from_millis(100),
            reaper_sweep_rate: crate::lease::DEFAULT_SWEEP_RATE,
            request_timeout: Duration::from_secs(30),
            redis_timeout: Duration::from_secs(3),
            redis_wait_replicas: 0,
            redis_wait_timeout: Duration::from_secs(1),
            max_payload_bytes: 1_048_576,
            max_checkpoint_bytes: 65_536,
            max_result_bytes: 65_536,
            default_max_attempts: 1,
            metrics_max_job_names: 100,
            // The label cap is process-wide and a test process runs many servers, each with
            // its own queues: tests that check labels must not find them turned into `other`.
            metrics_max_queues: 10_000,
            max_queues: crate::store::DEFAULT_MAX_QUEUES,
            config: None,
            log_format: LogFormat::Pretty,
            print_config: false,
            tls: TlsArgs::default(),
            auth: AuthArgs::default(),
            abuse: AbuseArgs::default(),
            conn: ConnArgs::default(),
            request_memory: RequestMemoryArgs::default(),
            replica: ReplicaArgs::default(),
            ui: UiArgs::default(),
            runtime: RuntimeArgs::default(),
        }
    }

    /// Checks ranges clap cannot express. Called before binding; the error names the flag.
    pub fn validate(&self) -> Result<(), String> {
        const MS: Duration = Duration::from_millis(1);
        const SEC: Duration = Duration::from_secs(1);
        const MINUTE: Duration = Duration::from_secs(60);
        const HOUR: Duration = Duration::from_secs(3600);
        const MAX: Duration = Duration::MAX;
        let ranges = [
            ("lease-duration", self.lease_duration, SEC, HOUR),
            ("heartbeat-timeout", self.heartbeat_timeout, SEC, MAX),
            ("reaper-interval", self.reaper_interval, MS * 10, MINUTE),
            ("shutdown-grace", self.shutdown_grace, Duration::ZERO, HOUR),
            ("request-timeout", self.request_timeout, MS, HOUR),
            ("redis-timeout", self.redis_timeout, MS * 10, MINUTE),
        ];
        for (flag, value, lo, hi) in ranges {
            if value < lo || value > hi {
                let [lo, hi, value] = [lo, hi, value].map(humantime::format_duration);
                return Err(format!(
                    "--{flag} must be between {lo} and {hi}, got {value}"
                ));
            }
        }
        if !(1..=MAX_PAYLOAD_LIMIT).contains(&self.max_payload_bytes) {
            return Err(format!(
                "--max-payload-bytes must be between 1 and {MAX_PAYLOAD_LIMIT}, got {}",
                self.max_payload_bytes
            ));
        }
        for (flag, value) in [
            ("max-checkpoint-bytes", self.max_checkpoint_bytes),
            ("max-result-bytes", self.max_result_bytes),
        ] {
            if !(1..=MAX_DATA_LIMIT).contains(&value) {
                return Err(format!(
                    "--{flag} must be between 1 and {MAX_DATA_LIMIT}, got {value}"
                ));
            }
        }
        if !(1..=1000).contains(&self.default_max_attempts) {
            return Err(format!(
                "--default-max-attempts must be between 1 and 1000, got {}",
                self.default_max_attempts
            ));
        }
        if !(1..=10_000).contains(&self.metrics_max_job_names) {
            return Err(format!(
                "--metrics-max-job-names must be between 1 and 10000, got {}",
                self.metrics_max_job_names
            ));
        }
        if !(1..=10_000).contains(&self.metrics_max_queues) {
            return Err(format!(
                "--metrics-max-queues must be between 1 and 10000, got {}",
                self.metrics_max_queues
            ));
        }
        if self.redis_wait_replicas > 16 {
            return Err(format!(
                "--redis-wait-replicas must be between 0 and 16, got {}",
                self.redis_wait_replicas
            ));
        }
        // Only checked when it is used: a short --redis-timeout alone must still start.
        if self.redis_wait_replicas > 0
            && (self.redis_wait_timeout < MS || self.redis_wait_timeout >= self.redis_timeout)
        {
            return Err(format!(
                "--redis-wait-timeout must be at least 1ms and less than --redis-timeout ({}), got {}",
                humantime::format_duration(self.redis_timeout),
                humantime::format_duration(self.redis_wait_timeout)
            ));
        }
        if self.reaper_sweep_rate > 1000 {
            return Err(format!(
                "--reaper-sweep-rate must be between 0 and 1000, got {}",
                self.reaper_sweep_rate
            ));
        }
        if let Some(url) = &self.redis_url {
            crate::store::check_redis_url(url)?;
        }
        if !(1..=1_000_000).contains(&self.max_queues) {
            return Err(format!(
                "--max-queues must be between 1 and 1000000, got {}",
                self.max_queues
            ));
        }
        self.tls.validate()?;
        self.auth.validate()?;
        self.auth.check_bind(self.grpc_addr)?;
        self.abuse.validate()?;
        self.conn.validate()?;
        self.request_memory.validate(self.max_payload_bytes)?;
        self.replica.validate()?;
        self.ui.validate()?;
        self.ui.check_bind(
            self.auth.auth_file.is_some(),
            self.auth.insecure,
            self.http_addr,
        )?;
        Ok(())
    }

    /// The Redis URL with credentials hidden, safe to log.
    pub fn redacted_redis_url(&self) -> Option<String> {
        self.redis_url.as_deref().map(redact_url)
    }

    /// The effective configuration as `JOBWIRE_*=value` lines (secrets redacted), in the
    /// form the flags and variables take, for `--print-config`.
    pub fn effective(&self) -> String {
        use clap::ValueEnum;
        let d = |d: Duration| humantime::format_duration(d).to_string();
        let e = |v: &dyn Fn() -> Option<clap::builder::PossibleValue>| {
            v().map(|p| p.get_name().to_owned()).unwrap_or_default()
        };
        let redis = self.redacted_redis_url().unwrap_or_default();
        let lines = [
            ("JOBWIRE_GRPC_ADDR", self.grpc_addr.to_string()),
            ("JOBWIRE_HTTP_ADDR", self.http_addr.to_string()),
            ("JOBWIRE_REDIS_URL", redis),
            ("JOBWIRE_DATA_DIR", self.data_dir.display().to_string()),
            (
                "JOBWIRE_REDIS_FSYNC",
                e(&|| self.redis_fsync.to_possible_value()),
            ),
            ("JOBWIRE_ALLOW_EVICTION", self.allow_eviction.to_string()),
            ("JOBWIRE_SHUTDOWN_GRACE", d(self.shutdown_grace)),
            ("JOBWIRE_LEASE_DURATION", d(self.lease_duration)),
            ("JOBWIRE_HEARTBEAT_TIMEOUT", d(self.heartbeat_timeout)),
            ("JOBWIRE_REAPER_INTERVAL", d(self.reaper_interval)),
            (
                "JOBWIRE_REAPER_SWEEP_RATE",
                self.reaper_sweep_rate.to_string(),
            ),
            ("JOBWIRE_REQUEST_TIMEOUT", d(self.request_timeout)),
            ("JOBWIRE_REDIS_TIMEOUT", d(self.redis_timeout)),
            (
                "JOBWIRE_REDIS_WAIT_REPLICAS",
                self.redis_wait_replicas.to_string(),
            ),
            ("JOBWIRE_REDIS_WAIT_TIMEOUT", d(self.redis_wait_timeout)),
            (
                "JOBWIRE_MAX_PAYLOAD_BYTES",
                self.max_payload_bytes.to_string(),
            ),
            (
                "JOBWIRE_MAX_CHECKPOINT_BYTES",
                self.max_checkpoint_bytes.to_string(),
            ),
            (
                "JOBWIRE_MAX_RESULT_BYTES",
                self.max_result_bytes.to_string(),
            ),
            (
                "JOBWIRE_DEFAULT_MAX_ATTEMPTS",
                self.default_max_attempts.to_string(),
            ),
            (
                "JOBWIRE_METRICS_MAX_JOB_NAMES",
                self.metrics_max_job_names.to_string(),
            ),
            (
                "JOBWIRE_METRICS_MAX_QUEUES",
                self.metrics_max_queues.to_string(),
            ),
            ("JOBWIRE_MAX_QUEUES", self.max_queues.to_string()),
            (
                "JOBWIRE_CONFIG",
                self.config
                    .as_ref()
                    .map(|p| p.display().to_string())
                    .unwrap_or_default(),
            ),
            (
                "JOBWIRE_LOG_FORMAT",
                e(&|| self.log_format.to_possible_value()),
            ),
        ];
        let more = [
            self.tls.effective(),
            self.auth.effective(),
            self.abuse.effective(),
            self.conn.effective(),
            self.request_memory.effective(),
            self.replica.effective(),
            self.ui.effective(),
            self.runtime.effective(),
        ];
        let lines = lines.into_iter().chain(more.into_iter().flatten());
        let mut out = String::from(if self.redis_url.is_none() {
            "# no JOBWIRE_REDIS_URL: an embedded redis-server runs in JOBWIRE_DATA_DIR\n"
        } else {
            "# JOBWIRE_REDIS_URL is set: JOBWIRE_DATA_DIR and JOBWIRE_REDIS_FSYNC are unused\n"
        });
        for (k, v) in lines {
            out.push_str(&format!("{k}={v}\n"));
        }
        out
    }
}

#[cfg(test)]
mod tests;
