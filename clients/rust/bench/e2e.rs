//! The end-to-end no-op throughput of the Rust SDK's Worker, as `jobwire bench --only e2e
//! --e2e 1x100 -n 20000` measures the server: 20,000 jobs of 16 bytes pre-filled with
//! EnqueueBatch(1000) on a fresh queue with keep_completed 0, then one Worker with
//! concurrency 100 and a no-op handler. jobs/s = jobs / (first lease -> last ack); the last
//! ack is seen by polling the queue's counts every 5 ms (waiting, delayed and active all 0).
//!
//! `cargo bench -p jobwire-client --bench e2e -- --server 127.0.0.1:50051 [-n 20000]
//! [--concurrency 100]`; prints `rust e2e 1x100: N jobs/s`.

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use jobwire_client::{pb, Client, ClientOptions, Ctx, Job, Worker, WorkerOptions};

fn arg(name: &str, default: &str) -> String {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
        .unwrap_or_else(|| default.to_owned())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let server = arg("--server", "127.0.0.1:50051");
    let n: usize = arg("-n", "20000").parse()?;
    let concurrency: u32 = arg("--concurrency", "100").parse()?;
    let client = Client::connect(&server, ClientOptions::default()).await?;
    let queue = format!("rust-e2e-{}", std::process::id());
    let retention = pb::QueueConfig {
        retention: Some(pb::Retention {
            keep_completed: Some(0),
            ..Default::default()
        }),
        ..Default::default()
    };
    client
        .update_queue_config(&queue, retention, &["retention"])
        .await?;
    for start in (0..n).step_by(1000) {
        let specs = (start..(start + 1000).min(n))
            .map(|i| pb::JobSpec {
                queue: queue.clone(),
                job_id: i.to_string(),
                name: "noop".into(),
                payload: vec![b'x'; 16],
                ..Default::default()
            })
            .collect();
        for r in client.enqueue_specs(specs, true).await? {
            r.map_err(|e| format!("enqueue: {}", e.message))?;
        }
    }

    let first: Arc<OnceLock<Instant>> = Arc::default();
    let mut worker = Worker::new(
        client.clone(),
        WorkerOptions {
            queues: vec![queue.clone()],
            concurrency,
            handle_signals: false,
            ..Default::default()
        },
    );
    let f = first.clone();
    worker.handle_bytes("noop", move |_job: Job<Vec<u8>>, _ctx: Ctx| {
        f.get_or_init(Instant::now);
        async { Ok(()) }
    });
    let stop = worker.shutdown_token();
    let task = tokio::spawn(worker.run());
    let patience = Instant::now() + Duration::from_secs(120 + n as u64 / 100);
    let last = loop {
        let s = client.get_queue_stats(&queue).await?;
        if first.get().is_some() && s.waiting + s.delayed + s.active == 0 {
            break Instant::now();
        }
        if Instant::now() > patience {
            return Err(format!("timed out: {s:?}").into());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    stop.cancel();
    task.await??;
    let start = *first.get().ok_or("no lease")?;
    let secs = last.duration_since(start).as_secs_f64();
    eprintln!("{n} jobs in {secs:.3} s (first lease to last ack)");
    println!("rust e2e 1x{concurrency}: {:.0} jobs/s", n as f64 / secs);
    client.delete_queue(&queue, true).await?;
    Ok(())
}
