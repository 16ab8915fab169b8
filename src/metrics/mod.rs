//! Prometheus metrics (DESIGN.md section 7): the names, their help text and units, the
//! exporter with histogram buckets, and the recording helpers the rest of the server calls.
//!
//! Counters and histograms are per replica (sum them across replicas); the queue gauges are
//! read from Redis and are the same on every replica (take `max`), except
//! `jobwire_workers_connected`, which counts this replica's streams (sum it). Names follow
//! Prometheus conventions: base units, `_total` on counters only, `_seconds` on durations.
//! Labels are bounded: `queue` is a validated name, `job_name` is capped per queue
//! ([`labels`]), and no job id, error text or payload is ever a label.

mod events;
mod grpc;
pub mod history;
pub mod labels;
mod scrape;

use std::sync::OnceLock;

use metrics::{describe_counter, describe_gauge, describe_histogram, Unit};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

pub use events::*;
pub use grpc::GrpcMetricsLayer;
pub use scrape::Scraper;

/// Jobs created by Enqueue/EnqueueBatch.
pub const JOBS_ENQUEUED: &str = "jobwire_jobs_enqueued_total";
/// Enqueues whose job_id already existed (nothing created).
pub const JOBS_DEDUPLICATED: &str = "jobwire_jobs_deduplicated_total";
/// Leases handed to workers.
pub const JOBS_LEASED: &str = "jobwire_jobs_leased_total";
/// Jobs acked.
pub const JOBS_COMPLETED: &str = "jobwire_jobs_completed_total";
/// Failed attempts, by disposition (retry, no_retry, rate_limited, lease_expired, timed_out,
/// cancelled: the Fail of a cancelled job, which ends CANCELLED).
pub const JOB_FAILURES: &str = "jobwire_job_failures_total";
/// Failed attempts that were scheduled to run again (rate-limited returns excluded).
pub const JOB_RETRIES: &str = "jobwire_job_retries_total";
/// Jobs moved to the dead-letter queue, by reason.
pub const JOBS_DEAD_LETTERED: &str = "jobwire_jobs_dead_lettered_total";
/// Dead-letter entries replayed (back to waiting) by ReplayDeadLetters on this replica.
pub const DEAD_LETTERS_REPLAYED: &str = "jobwire_dead_letters_replayed_total";
/// Completed jobs and dead-letter entries removed by retention (count or age), by state.
pub const JOBS_TRIMMED: &str = "jobwire_jobs_trimmed_total";
/// Jobs cancelled (CancelJob, CancelJobs): waiting or delayed ones ended, active ones whose
/// holders were told.
pub const JOBS_CANCELLED: &str = "jobwire_jobs_cancelled_total";
/// Jobs not started before their expire time (EXPIRED, or dead-lettered with reason
/// EXPIRED).
pub const JOBS_EXPIRED: &str = "jobwire_jobs_expired_total";
/// Leases that expired (worker died, hung or lost its stream) or attempts that timed out.
pub const LEASE_EXPIRATIONS: &str = "jobwire_lease_expirations_total";
/// Lease to ack/fail, seconds.
pub const JOB_RUN_SECONDS: &str = "jobwire_job_run_seconds";
/// Ready to leased, seconds.
pub const JOB_WAIT_SECONDS: &str = "jobwire_job_wait_seconds";
/// Jobs per queue and state (waiting, delayed, active, completed, dead), from Redis.
pub const QUEUE_JOBS: &str = "jobwire_queue_jobs";
/// Age of the oldest waiting job, seconds, from Redis.
pub const QUEUE_OLDEST_WAITING_AGE: &str = "jobwire_queue_oldest_waiting_age_seconds";
/// Age of the oldest waiting job of each priority in use, seconds, from Redis (labels
/// `queue`, `priority`: see `scrape.rs` for the bound).
pub const QUEUE_PRIORITY_OLDEST_WAITING_AGE: &str =
    "jobwire_queue_priority_oldest_waiting_age_seconds";
/// Age of the oldest dead-letter entry, seconds, from Redis.
pub const DEAD_LETTER_OLDEST_AGE: &str = "jobwire_dead_letter_oldest_age_seconds";
/// 1 when the queue is paused, from Redis.
pub const QUEUE_PAUSED: &str = "jobwire_queue_paused";
/// Groups of the queue with waiting jobs (no per-group label: a queue may have millions), from
/// Redis.
pub const QUEUE_GROUPS_WAITING: &str = "jobwire_queue_groups_waiting";
/// Worker streams on this replica subscribed to the queue.
pub const WORKERS_CONNECTED: &str = "jobwire_workers_connected";
/// Lease attempts held back by the queue's rate or concurrency limit.
pub const RATE_LIMIT_THROTTLED: &str = "jobwire_rate_limit_throttled_total";
/// gRPC calls handled, by service, method and status code (go-grpc-prometheus names).
pub const GRPC_HANDLED: &str = "grpc_server_handled_total";
/// gRPC call latency, seconds, until the response headers (streams: until the stream opens).
pub const GRPC_HANDLING_SECONDS: &str = "grpc_server_handling_seconds";
/// Lua script call latency, seconds, by script.
pub const REDIS_SCRIPT_SECONDS: &str = "jobwire_redis_script_seconds";
/// Redis command errors, by kind (unavailable, error).
pub const REDIS_ERRORS: &str = "jobwire_redis_errors_total";
/// 1 while the health probe's write reaches a master (even a full one), 0 while Redis is
/// unreachable, a replica, loading or failing over.
pub const REDIS_UP: &str = "jobwire_redis_up";
/// Admin actions carried out (replay, dead-letter delete, purge, pause, resume, config
/// change, queue delete), by action; see `auth/audit.rs`.
pub const ADMIN_ACTIONS: &str = "jobwire_admin_actions_total";
/// Always 1, labelled with the version and git sha.
pub const BUILD_INFO: &str = "jobwire_build_info";

/// Histogram buckets for every `_seconds` metric: 0.5 ms to 5 min.
const SECONDS_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0, 120.0, 300.0,
];

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// Installs the process-wide Prometheus recorder once (later calls return the same handle:
/// tests run several servers in one process) and describes every metric.
pub fn install() -> PrometheusHandle {
    HANDLE
        .get_or_init(|| {
            let builder = PrometheusBuilder::new()
                .with_recommended_naming(false)
                .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), SECONDS_BUCKETS);
            let handle = match builder {
                Ok(b) => match b.install_recorder() {
                    Ok(h) => h,
                    Err(e) => {
                        tracing::warn!(error = %e, "metrics recorder not installed");
                        PrometheusBuilder::new().build_recorder().handle()
                    }
                },
                Err(e) => {
                    tracing::warn!(error = %e, "metrics buckets rejected");
                    PrometheusBuilder::new().build_recorder().handle()
                }
            };
            describe_all();
            for kind in ["unavailable", "error"] {
                metrics::counter!(REDIS_ERRORS, "kind" => kind).increment(0);
            }
            crate::auth::audit::zero_counters();
            metrics::gauge!(BUILD_INFO, "version" => env!("CARGO_PKG_VERSION"), "git_sha" => env!("JOBWIRE_GIT_SHA")).set(1.0);
            handle
        })
        .clone()
}

/// HELP text and unit of every metric.
pub fn describe_all() {
    describe_counter!(
        JOBS_ENQUEUED,
        Unit::Count,
        "Jobs created by Enqueue and EnqueueBatch."
    );
    describe_counter!(
        JOBS_DEDUPLICATED,
        Unit::Count,
        "Enqueues whose job_id already existed; nothing was created."
    );
    describe_counter!(JOBS_LEASED, Unit::Count, "Leases handed to workers.");
    describe_counter!(JOBS_COMPLETED, Unit::Count, "Jobs acked by a worker.");
    describe_counter!(
        JOB_FAILURES,
        Unit::Count,
        "Failed attempts, by disposition: retry, no_retry, rate_limited, lease_expired, timed_out, cancelled (a cancelled job's Fail: it ends CANCELLED)."
    );
    describe_counter!(
        JOB_RETRIES,
        Unit::Count,
        "Failed attempts that were scheduled to run again (rate-limited returns excluded)."
    );
    describe_counter!(
        JOBS_DEAD_LETTERED,
        Unit::Count,
        "Jobs moved to the dead-letter queue, by reason."
    );
    describe_counter!(
        DEAD_LETTERS_REPLAYED,
        Unit::Count,
        "Dead-letter entries replayed back to waiting by ReplayDeadLetters."
    );
    describe_counter!(
        JOBS_TRIMMED,
        Unit::Count,
        "Jobs removed by retention (count or age limit), by state: completed or dead."
    );
    describe_counter!(
        JOBS_CANCELLED,
        Unit::Count,
        "Jobs cancelled by CancelJob or CancelJobs (waiting and delayed ones ended, active ones' holders told)."
    );
    describe_counter!(
        JOBS_EXPIRED,
        Unit::Count,
        "Jobs not started before their expire time (expired, or dead-lettered with reason expired)."
    );
    describe_counter!(
        LEASE_EXPIRATIONS,
        Unit::Count,
        "Leases the reaper failed because their deadline passed or the attempt timed out."
    );
    describe_histogram!(
        JOB_RUN_SECONDS,
        Unit::Seconds,
        "Time from lease to ack or fail."
    );
    describe_histogram!(
        JOB_WAIT_SECONDS,
        Unit::Seconds,
        "Time from ready (enqueue, retry due, replay) to leased."
    );
    describe_gauge!(
        QUEUE_JOBS,
        Unit::Count,
        "Jobs per queue and state, read from Redis (same on every replica: take max)."
    );
    describe_gauge!(
        QUEUE_OLDEST_WAITING_AGE,
        Unit::Seconds,
        "Age of the oldest waiting job, read from Redis; 0 when none waits."
    );
    describe_gauge!(
        QUEUE_PRIORITY_OLDEST_WAITING_AGE,
        Unit::Seconds,
        "Age of the oldest waiting job of each priority with waiting jobs (higher priorities are leased first: a low priority's age growing while the queue moves is starvation), read from Redis; 0 once none of that priority waits. At most 20 priorities per queue (the oldest), the rest as priority=\"other\"."
    );
    describe_gauge!(
        DEAD_LETTER_OLDEST_AGE,
        Unit::Seconds,
        "Age of the oldest dead-letter entry, read from Redis; 0 when the queue has none."
    );
    describe_gauge!(
        QUEUE_PAUSED,
        Unit::Count,
        "1 when the queue is paused, read from Redis."
    );
    describe_gauge!(
        QUEUE_GROUPS_WAITING,
        Unit::Count,
        "Groups (job group keys, e.g. tenants) of the queue with waiting jobs, the default group counted when it has some, read from Redis. The oldest waiting age of any group is jobwire_queue_oldest_waiting_age_seconds."
    );
    describe_gauge!(
        WORKERS_CONNECTED,
        Unit::Count,
        "Worker streams subscribed to the queue on this replica (sum across replicas)."
    );
    describe_counter!(
        RATE_LIMIT_THROTTLED,
        Unit::Count,
        "Lease attempts held back by the queue's rate or concurrency limit."
    );
    describe_counter!(
        GRPC_HANDLED,
        Unit::Count,
        "gRPC calls handled, by service, method and status code."
    );
    describe_histogram!(
        GRPC_HANDLING_SECONDS,
        Unit::Seconds,
        "gRPC call latency until the response headers (a stream: until it opens)."
    );
    describe_histogram!(
        REDIS_SCRIPT_SECONDS,
        Unit::Seconds,
        "Lua script call latency, by script."
    );
    describe_counter!(
        REDIS_ERRORS,
        Unit::Count,
        "Failed Redis calls, by kind: unavailable (connection, timeout) or error."
    );
    describe_gauge!(
        REDIS_UP,
        Unit::Count,
        "1 while a write reaches a Redis master (even a full one), 0 while Redis is unreachable, a replica, loading or failing over."
    );
    describe_counter!(
        crate::reload::RELOADS,
        Unit::Count,
        "Reloads of a watched file (tls: the gRPC port's certificate files, auth: the auth file, metrics-token: the /metrics token file), by file and result (ok, error: the previous one stays in force)."
    );
    describe_counter!(
        ADMIN_ACTIONS,
        Unit::Count,
        "Admin actions carried out, by action: replay_dead_letters, delete_dead_letters, purge_queue, pause_queue, resume_queue, update_queue_config, delete_queue, update_group_config, pause_group, resume_group."
    );
    describe_gauge!(
        crate::transport::tls::CERT_EXPIRY,
        Unit::Seconds,
        "notAfter of the gRPC port's TLS certificate in force, Unix seconds (only with --tls-cert)."
    );
    describe_counter!(
        crate::transport::caps::CONNECTIONS_REFUSED,
        Unit::Count,
        "Connections closed at accept or before their first request, by port (grpc, http, metrics) and reason (per_ip_limit: --max-connections-per-ip; preface_timeout: no HTTP/2 preface within --grpc-preface-timeout)."
    );
    describe_gauge!(
        crate::transport::caps::CONNECTIONS_OPEN,
        Unit::Count,
        "Connections open now, by port (grpc, http, metrics); a port at its cap (--max-connections, --http-max-connections) accepts no more until one closes."
    );
    describe_gauge!(
        BUILD_INFO,
        Unit::Count,
        "Always 1; labelled with the jobwire version and git sha."
    );
}
