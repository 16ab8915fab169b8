//! The 20-sign-up dead-letter experiment on the Rust SDK (the reference is
//! examples/python/signup_demo.py; same numbers).
//!
//! Twenty sign-ups each enqueue a "send-welcome-email" job. A fake email provider answers
//! "400 invalid address" for good for user_4 and user_9 and "503 service unavailable" for
//! user_12..14 until it recovers. The queue allows 3 attempts with exponential backoff and
//! jitter (50 ms base). Three runs, one table row each:
//!
//! | strategy                             | emailed | dead-lettered | provider requests |
//! | retry everything                     | 15      | 5             | 30                |
//! | permanent errors not retried         | 15      | 5             | 26                |
//! | replay after recovery (not the 400s) | 18      | 2             | 29                |
//!
//! Usage: `cargo run -p jobwire-client --example signup_demo -- --server 127.0.0.1:50051
//! [--token-file F] [--ca F]`. Exit codes: 0 the numbers match, 1 a number differs, 2 the
//! run failed.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use jobwire_client::{
    pb, Backoff, Client, ClientOptions, Ctx, EnqueueOptions, Job, JobError, Payload, TlsOptions,
    Worker, WorkerOptions,
};

const SIGNUPS: usize = 20;
const BAD_ADDRESSES: [&str; 2] = ["user_4", "user_9"];
const OUTAGE: [&str; 3] = ["user_12", "user_13", "user_14"];
const JOB_NAME: &str = "send-welcome-email";
const WORKERS: usize = 2;
const CREDITS: u32 = 4;

/// The expected rows: (strategy, emailed, dead-lettered, provider requests).
pub const EXPECTED: [(&str, usize, usize, usize); 3] = [
    ("retry everything", 15, 5, 30),
    ("permanent errors not retried", 15, 5, 26),
    ("replay after recovery (not the 400s)", 18, 2, 29),
];

#[derive(serde::Serialize, serde::Deserialize)]
struct Signup {
    user_id: String,
    email: String,
}

/// A fake email provider: counts requests, rejects bad addresses, is down for some users
/// until `recover`, dedupes sends by idempotency key.
#[derive(Default)]
struct Provider {
    calls: usize,
    down: HashSet<String>,
    sent: HashMap<String, String>,
}

enum SendError {
    Rejected(String),
    Unavailable,
}

impl Provider {
    fn new() -> Arc<Mutex<Provider>> {
        Arc::new(Mutex::new(Provider {
            down: OUTAGE.iter().map(|s| (*s).to_owned()).collect(),
            ..Provider::default()
        }))
    }

    fn send(&mut self, s: &Signup, key: &str) -> Result<(), SendError> {
        self.calls += 1;
        let valid = s.email.split_once('@').is_some_and(|(user, host)| {
            !user.is_empty() && host.contains('.') && !host.contains(',')
        });
        if !valid {
            return Err(SendError::Rejected(format!(
                "400 invalid address: {}",
                s.email
            )));
        }
        if self.down.contains(&s.user_id) {
            return Err(SendError::Unavailable);
        }
        self.sent
            .entry(key.to_owned())
            .or_insert_with(|| s.user_id.clone());
        Ok(())
    }
}

/// Everything that went wrong besides the numbers.
type Problems = Arc<Mutex<Vec<String>>>;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

async fn enqueue_signups(client: &Client, queue: &str) -> Result<Vec<String>, String> {
    let mut ids = Vec::new();
    for i in 1..=SIGNUPS {
        let user = format!("user_{i}");
        let mut email = format!("{user}@example.com");
        if BAD_ADDRESSES.contains(&user.as_str()) {
            email = email.replace(".com", ",com");
        }
        let job_id = format!("welcome-email:{user}");
        let payload = Payload::json(&Signup {
            user_id: user,
            email,
        })
        .map_err(|e| e.to_string())?;
        let options = EnqueueOptions {
            job_id: Some(job_id.clone()),
            max_attempts: Some(3),
            backoff: Some(Backoff::Exponential {
                delay: Duration::from_millis(50),
                max_delay: Some(Duration::from_secs(1)),
                jitter: 0.5,
            }),
            metadata: [("demo".to_owned(), "signup".to_owned())].into(),
            ..Default::default()
        };
        let r = client
            .enqueue(queue, JOB_NAME, payload, options)
            .await
            .map_err(|e| format!("enqueue {job_id}: {e}"))?;
        if !r.created {
            return Err(format!("{job_id} already existed on a fresh queue"));
        }
        ids.push(job_id);
    }
    Ok(ids)
}

/// Runs two workers on `queue` until every job is COMPLETED or DEAD.
async fn work_until_settled(
    client: &Client,
    queue: &str,
    ids: &[String],
    provider: &Arc<Mutex<Provider>>,
    classify: bool,
    keys: &Arc<Mutex<HashMap<String, HashSet<String>>>>,
) -> Result<(), String> {
    let mut running = Vec::new();
    for i in 0..WORKERS {
        let mut worker = Worker::new(
            client.clone(),
            WorkerOptions {
                queues: vec![queue.to_owned()],
                concurrency: CREDITS,
                worker_id: Some(format!("signup-demo-{queue}-{i}")),
                handle_signals: false,
                ..Default::default()
            },
        );
        let (provider, keys) = (provider.clone(), keys.clone());
        worker.handle(JOB_NAME, move |job: Job<Signup>, _ctx: Ctx| {
            let (provider, keys) = (provider.clone(), keys.clone());
            async move {
                lock(&keys)
                    .entry(format!("{}/{}", job.queue(), job.id()))
                    .or_default()
                    .insert(job.idempotency_key.clone());
                let sent = lock(&provider).send(&job.payload, &job.idempotency_key);
                match sent {
                    Ok(()) => Ok(()),
                    Err(SendError::Rejected(m)) if classify => Err(JobError::non_retryable(m)),
                    Err(SendError::Rejected(m)) => Err(JobError::failed("invalid_address", m)),
                    Err(SendError::Unavailable) => Err(JobError::failed(
                        "provider_unavailable",
                        "503 service unavailable",
                    )),
                }
            }
        });
        let stop = worker.shutdown_token();
        running.push((stop, tokio::spawn(worker.run())));
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    let result = loop {
        let mut pending = 0;
        for id in ids {
            let j = client.get_job(queue, id).await.map_err(|e| e.to_string())?;
            let done = [pb::JobState::Completed as i32, pb::JobState::Dead as i32];
            if !done.contains(&j.state) {
                pending += 1;
            }
        }
        if pending == 0 {
            break Ok(());
        }
        if Instant::now() > deadline {
            break Err(format!("{pending} jobs on {queue} not settled within 60 s"));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    for (stop, _) in &running {
        stop.cancel();
    }
    for (_, task) in running {
        task.await
            .map_err(|e| e.to_string())?
            .map_err(|e| e.to_string())?;
    }
    result
}

async fn dead_count(client: &Client, queue: &str) -> Result<usize, String> {
    let (mut n, mut token) = (0, String::new());
    loop {
        let page = client
            .list_dead_letters(queue, 100, &token, None)
            .await
            .map_err(|e| e.to_string())?;
        n += page.dead_letters.len();
        if page.next_page_token.is_empty() {
            return Ok(n);
        }
        token = page.next_page_token;
    }
}

/// A row: (strategy, emailed, dead-lettered, provider requests).
pub type Row = (String, usize, usize, usize);

/// Runs the three strategies against the server at `target`; returns the rows and the
/// problems found besides the numbers.
pub async fn run(target: &str, options: ClientOptions) -> Result<(Vec<Row>, Vec<String>), String> {
    let client = Client::connect(target, options)
        .await
        .map_err(|e| e.to_string())?;
    let suffix = format!("{:08x}", rand_u32());
    let problems: Problems = Arc::default();
    let mut rows = Vec::new();
    let keys: Arc<Mutex<HashMap<String, HashSet<String>>>> = Arc::default();

    // (a) retry everything
    let qa = format!("signups-retry-all-{suffix}");
    let pa = Provider::new();
    let ids = enqueue_signups(&client, &qa).await?;
    work_until_settled(&client, &qa, &ids, &pa, false, &keys).await?;
    let (emailed, calls) = {
        let p = lock(&pa);
        (p.sent.len(), p.calls)
    };
    rows.push((
        EXPECTED[0].0.to_owned(),
        emailed,
        dead_count(&client, &qa).await?,
        calls,
    ));

    // (b) permanent errors not retried
    let qb = format!("signups-classified-{suffix}");
    let pb_ = Provider::new();
    let ids = enqueue_signups(&client, &qb).await?;
    work_until_settled(&client, &qb, &ids, &pb_, true, &keys).await?;
    let (emailed, calls) = {
        let p = lock(&pb_);
        (p.sent.len(), p.calls)
    };
    rows.push((
        EXPECTED[1].0.to_owned(),
        emailed,
        dead_count(&client, &qb).await?,
        calls,
    ));

    // (c) the provider recovers; replay the dead jobs that ran out of attempts on a 503.
    lock(&pb_).down.clear();
    let filter = pb::DeadLetterFilter {
        reason: pb::DeadReason::AttemptsExhausted as i32,
        error_type: "provider_unavailable".into(),
        ..Default::default()
    };
    let replayed = client
        .replay_dead_letters(&qb, vec![], Some(filter))
        .await
        .map_err(|e| e.to_string())?;
    let mut got = replayed.replayed_job_ids.clone();
    got.sort();
    let mut want: Vec<String> = OUTAGE
        .iter()
        .map(|u| format!("welcome-email:{u}"))
        .collect();
    want.sort();
    if got != want {
        lock(&problems).push(format!("replayed {got:?}, expected {want:?}"));
    }
    work_until_settled(&client, &qb, &ids, &pb_, true, &keys).await?;
    let (emailed, calls) = {
        let p = lock(&pb_);
        (p.sent.len(), p.calls)
    };
    rows.push((
        EXPECTED[2].0.to_owned(),
        emailed,
        dead_count(&client, &qb).await?,
        calls,
    ));

    for (id, k) in lock(&keys).iter() {
        if k.len() != 1 {
            lock(&problems).push(format!(
                "idempotency key of {id} changed across attempts: {k:?}"
            ));
        }
    }
    let problems = lock(&problems).clone();
    Ok((rows, problems))
}

fn rand_u32() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    h.finish() as u32
}

/// The table as markdown.
pub fn table(rows: &[Row]) -> String {
    let mut out = String::from(
        "| strategy | emailed | dead-lettered | provider requests |\n|---|---|---|---|\n",
    );
    for (s, e, d, c) in rows {
        out.push_str(&format!("| {s} | {e} | {d} | {c} |\n"));
    }
    out
}

/// The rows that differ from [`EXPECTED`].
pub fn mismatches(rows: &[Row]) -> Vec<String> {
    EXPECTED
        .iter()
        .zip(rows)
        .filter(|((_, e, d, c), (_, ge, gd, gc))| (e, d, c) != (ge, gd, gc))
        .map(|((s, e, d, c), (_, ge, gd, gc))| {
            format!("{s}: got {ge}/{gd}/{gc}, expected {e}/{d}/{c}")
        })
        .collect()
}

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

#[allow(dead_code)] // the tests include this file as a module and call `run`
#[tokio::main]
async fn main() -> std::process::ExitCode {
    let server = arg("--server").unwrap_or_else(|| "127.0.0.1:50051".into());
    let mut options = ClientOptions::default();
    if let Some(f) = arg("--token-file") {
        match std::fs::read_to_string(&f) {
            Ok(t) => options.token = Some(t.trim().to_owned()),
            Err(e) => {
                eprintln!("error: --token-file {f}: {e}");
                return std::process::ExitCode::from(2);
            }
        }
    }
    if let Some(ca) = arg("--ca") {
        match TlsOptions::ca_file(&ca) {
            Ok(t) => options.tls = Some(t),
            Err(e) => {
                eprintln!("error: --ca {ca}: {e}");
                return std::process::ExitCode::from(2);
            }
        }
    }
    match run(&server, options).await {
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::from(2)
        }
        Ok((rows, mut problems)) => {
            println!("\n{}", table(&rows));
            problems.extend(mismatches(&rows));
            for p in &problems {
                eprintln!("MISMATCH {p}");
            }
            if problems.is_empty() {
                println!("all three rows match the experiment (15/5/30, 15/5/26, 18/2/29)");
                std::process::ExitCode::SUCCESS
            } else {
                std::process::ExitCode::from(1)
            }
        }
    }
}
