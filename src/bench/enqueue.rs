//! Enqueue throughput: unary one at a time, unary with K in flight, EnqueueBatch of B; and
//! the floors under unary calls: a bare gRPC health check (one at a time and K in flight),
//! and a bare Redis round trip (the hop the server adds).
//! Window: first call sent to last reply received.

use super::client::{prefill, spec, Conn, SpecOpts};
use super::cpu::{measure, Pids};
use super::nodes::Nodes;
use jobwire_client::pb;
use serde_json::{Map, Value};

async fn unary(jobs: &Conn, job: pb::JobSpec) -> anyhow::Result<()> {
    jobs.enqueue_spec(job).await?;
    Ok(())
}

/// `n` unary Enqueue calls, each awaited before the next.
pub async fn sequential(
    ch: &Conn,
    pids: &Pids,
    n: usize,
    queues: &[String],
    o: &SpecOpts,
) -> anyhow::Result<Map<String, Value>> {
    let a = pids.snap();
    for i in 0..n {
        unary(ch, spec(queues, i, o)).await?;
    }
    Ok(measure(&a, &pids.snap(), n as f64))
}

/// `n` unary Enqueue calls from `producers` concurrent tasks sharing one connection, each
/// sending its share one after another (so `producers` calls are in flight).
pub async fn concurrent(
    ch: &Conn,
    pids: &Pids,
    n: usize,
    producers: usize,
    queues: &[String],
    o: &SpecOpts,
) -> anyhow::Result<Map<String, Value>> {
    let queues = std::sync::Arc::new(queues.to_vec());
    let producers = producers.max(1);
    let per = n.div_ceil(producers);
    let a = pids.snap();
    let tasks: Vec<_> = (0..producers)
        .map(|p| {
            let (ch, queues, o) = (ch.clone(), queues.clone(), o.clone());
            tokio::spawn(async move {
                for i in p * per..((p + 1) * per).min(n) {
                    unary(&ch, spec(&queues, i, &o)).await?;
                }
                anyhow::Ok(())
            })
        })
        .collect();
    for t in tasks {
        t.await??;
    }
    Ok(measure(&a, &pids.snap(), n as f64))
}

/// `n` jobs in EnqueueBatch calls of `batch`, one call at a time.
pub async fn batched(
    ch: &Conn,
    pids: &Pids,
    n: usize,
    batch: usize,
    queues: &[String],
    o: &SpecOpts,
) -> anyhow::Result<Map<String, Value>> {
    let a = pids.snap();
    prefill(ch, queues, n, batch, o).await?;
    Ok(measure(&a, &pids.snap(), n as f64))
}

/// `n` gRPC health checks (`grpc.health.v1.Health/Check`) from `in_flight` concurrent tasks
/// sharing one connection, each task awaiting its call before the next: a unary round trip
/// through the server (its tower layers included) that touches no Redis. With `in_flight`
/// 1 it is the floor of one-at-a-time Enqueue; with the concurrent scenario's `in_flight`,
/// the floor of concurrent unary Enqueue (no unary call per job can beat it on this box).
pub async fn health_checks(
    ch: &Conn,
    pids: &Pids,
    n: usize,
    in_flight: usize,
) -> anyhow::Result<Map<String, Value>> {
    use tonic_health::pb::{health_client::HealthClient, HealthCheckRequest};
    let in_flight = in_flight.max(1);
    let per = n.div_ceil(in_flight);
    let a = pids.snap();
    let tasks: Vec<_> = (0..in_flight)
        .map(|t| {
            let mut health = HealthClient::new(ch.conn());
            tokio::spawn(async move {
                for _ in t * per..((t + 1) * per).min(n) {
                    health
                        .check(HealthCheckRequest {
                            service: String::new(),
                        })
                        .await?;
                }
                anyhow::Ok(())
            })
        })
        .collect();
    for t in tasks {
        t.await??;
    }
    Ok(measure(&a, &pids.snap(), n as f64))
}

/// `n` Redis `PING`s to the first master of `nodes`, each awaited before the next: the
/// bare round trip of the hop the server adds between a client and Redis (loopback TCP,
/// RESP, no script), on a connection of its own.
pub async fn redis_pings(
    nodes: &mut Nodes,
    pids: &Pids,
    n: usize,
) -> anyhow::Result<Map<String, Value>> {
    let a = pids.snap();
    for _ in 0..n {
        nodes.ping_first().await?;
    }
    Ok(measure(&a, &pids.snap(), n as f64))
}
