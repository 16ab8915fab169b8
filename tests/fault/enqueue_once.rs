//! "The job exists once" for an Enqueue without a job_id (issue 32, items 2 and 3): the server
//! chooses the id, and a write of it may land although its caller never heard back.
//!
//! * A lost reply (Redis paused just past `--redis-timeout`): the server retries the write
//!   with the same id, and the late first write may have created the job, which a fast worker
//!   ran and `keep_completed = 0` removed before the retry landed. The retry must not create
//!   it again: one run per Enqueue.
//! * `--redis-wait-replicas` with the replica stopped (SIGSTOP): the write lands on the master
//!   and the call answers NOT_REPLICATED. The error names the job's id (ErrorInfo `job_id`,
//!   and the message), so the client's retries find the job: one acknowledged Enqueue plus
//!   retries is one job, and one run, also when the job was run and removed in between. A
//!   batch whose write was not replicated answers per item, each naming its job's id, instead
//!   of failing as a whole (which an SDK retries, creating every job again).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jobwire::pb;
use jobwire::pb::queue_service_client::QueueServiceClient;
use tonic_types::StatusExt;

use crate::harness::*;
use crate::procs::{RedisOpts, RedisProc};

const NO_AOF: RedisOpts = RedisOpts {
    aof: None,
    policy: "noeviction",
};

/// Completed jobs are removed at once (`keep_completed = 0`).
async fn keep_nothing(app: &TestApp, queue: &str) {
    QueueServiceClient::new(app.channel.clone())
        .update_queue_config(pb::UpdateQueueConfigRequest {
            queue: queue.into(),
            config: Some(pb::QueueConfig {
                retention: Some(pb::Retention {
                    keep_completed: Some(0),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            update_mask: None,
        })
        .await
        .expect("update config");
}

/// A worker that acks every lease at once (without waiting for the Settled), recording each
/// lease's job id and attempt; it stops when `stop` is set and no lease came for 200 ms.
struct FastWorker {
    runs: Arc<Mutex<Vec<(String, u32)>>>,
    stop: Arc<std::sync::atomic::AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl FastWorker {
    async fn start(app: &TestApp, queue: &str) -> FastWorker {
        let mut w = TestWorker::open(app, &[queue], 10, "fast").await;
        let runs = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (r, s) = (runs.clone(), stop.clone());
        let task = tokio::spawn(async move {
            loop {
                match w.lease_within(Duration::from_millis(200)).await {
                    Some(l) => {
                        let job = l.job.clone().expect("job");
                        r.lock()
                            .expect("runs")
                            .push((job.job_id.clone(), l.attempt));
                        w.send(pb::subscribe_request::Message::Ack(pb::AckRequest {
                            result: Vec::new(),
                            queue: job.queue,
                            job_id: job.job_id,
                            lease_token: l.lease_token,
                        }));
                    }
                    None if s.load(std::sync::atomic::Ordering::SeqCst) => return,
                    None => {}
                }
            }
        });
        FastWorker { runs, stop, task }
    }

    /// Runs of each job id so far.
    fn runs(&self) -> HashMap<String, usize> {
        let mut by_id = HashMap::new();
        for (id, _) in self.runs.lock().expect("runs").iter() {
            *by_id.entry(id.clone()).or_insert(0) += 1;
        }
        by_id
    }

    async fn stop(self) -> HashMap<String, usize> {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        let runs = self.runs.clone();
        self.task.await.expect("worker task");
        let runs = runs.lock().expect("runs").clone();
        for (id, attempt) in &runs {
            assert_eq!(*attempt, 1, "job {id} ran as attempt {attempt}");
        }
        let mut by_id = HashMap::new();
        for (id, _) in runs {
            *by_id.entry(id).or_insert(0) += 1;
        }
        by_id
    }
}

/// The repro: 15 Enqueues without a job_id, each sent as Redis pauses for 212 ms
/// with `--redis-timeout 200ms`; the late first write lands at 212 ms, the fast worker runs
/// the job and `keep_completed = 0` removes it, then the server's retry (at about 250 ms)
/// lands. The worker is on a second jobwire with the default timeout, so that its own lease
/// call, queued behind the pause, is not lost too (which would hand the job back and miss
/// the window). Before the fix 13 of 15 Enqueues made a second job under the same id, run
/// again as attempt 1.
#[tokio::test]
async fn an_enqueue_without_id_retried_after_its_job_is_gone_runs_once() {
    const ROUNDS: usize = 15;
    let redis = RedisProc::start(NO_AOF).await;
    let mut cfg = test_config(&redis.url);
    cfg.redis_timeout = Duration::from_millis(200);
    let app = TestApp::spawn(cfg).await;
    let workers = TestApp::spawn(test_config(&redis.url)).await;
    keep_nothing(&app, "once").await;
    let worker = FastWorker::start(&workers, "once").await;
    enqueue(&app, spec("once", "warm-up")).await;
    eventually(Duration::from_secs(10), || async {
        worker.runs().contains_key("warm-up")
    })
    .await;
    let mut pauser = redis.conn().await;
    let mut answered = Vec::new();
    for _ in 0..ROUNDS {
        let _: () = redis::cmd("CLIENT")
            .arg("PAUSE")
            .arg(212)
            .arg("ALL")
            .query_async(&mut pauser)
            .await
            .expect("client pause");
        let r = app
            .jobs()
            .enqueue(pb::EnqueueRequest {
                job: Some(spec("once", "")),
            })
            .await;
        match r {
            Ok(r) => {
                let r = r.into_inner();
                assert!(r.created, "the server chose the id: created");
                answered.push(r.job.expect("job").job_id);
            }
            Err(s) => eprintln!("an Enqueue failed ({s:?}); its job is counted all the same"),
        }
        tokio::time::sleep(Duration::from_millis(400)).await;
    }
    // Every answered job ran (the others may have, once).
    eventually(Duration::from_secs(10), || async {
        let runs = worker.runs();
        answered.iter().all(|id| runs.contains_key(id))
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let runs = worker.stop().await;
    let twice: Vec<_> = runs.iter().filter(|(_, n)| **n > 1).collect();
    eprintln!(
        "{} of {ROUNDS} Enqueues answered; {} jobs ran, {} of them more than once",
        answered.len(),
        runs.len() - 1,
        twice.len()
    );
    assert!(
        twice.is_empty(),
        "jobs created and run again by a retry: {twice:?}"
    );
    assert!(
        runs.len() - 1 <= ROUNDS,
        "{} jobs from {ROUNDS} Enqueues",
        runs.len() - 1
    );
}

/// The same race made exact: the test watches the queue and deletes the job (DeleteJob, on
/// a second jobwire) the moment the late first write has created it, before the server's
/// retry lands 40 ms later. The retry must not create it again: no job is left.
#[tokio::test]
async fn an_enqueue_without_id_retried_after_delete_job_is_not_created_again() {
    const ROUNDS: usize = 30;
    let redis = RedisProc::start(NO_AOF).await;
    let mut cfg = test_config(&redis.url);
    cfg.redis_timeout = Duration::from_millis(200);
    let app = TestApp::spawn(cfg).await;
    let admin = TestApp::spawn(test_config(&redis.url)).await;
    enqueue(&app, spec("gone", "warm-up")).await;
    admin
        .jobs()
        .delete_job(pb::DeleteJobRequest {
            queue: "gone".into(),
            job_id: "warm-up".into(),
        })
        .await
        .expect("delete");
    let (mut pauser, mut watcher) = (redis.conn().await, redis.conn().await);
    let mut again = 0;
    for round in 0..ROUNDS {
        let _: () = redis::cmd("CLIENT")
            .arg("PAUSE")
            .arg(212)
            .arg("ALL")
            .query_async(&mut pauser)
            .await
            .expect("client pause");
        let (jobs, deleter) = (app.jobs(), admin.jobs());
        let call = tokio::spawn(async move {
            let mut jobs = jobs;
            jobs.enqueue(pb::EnqueueRequest {
                job: Some(spec("gone", "")),
            })
            .await
        });
        // The first write lands when the pause ends; delete its job at once.
        let mut deleted = None;
        for _ in 0..2000 {
            let ids: Vec<String> = redis::cmd("HKEYS")
                .arg("jw:{gone}:jobs")
                .query_async(&mut watcher)
                .await
                .expect("hkeys");
            if let Some(id) = ids.into_iter().next() {
                let mut a = deleter.clone();
                a.delete_job(pb::DeleteJobRequest {
                    queue: "gone".into(),
                    job_id: id.clone(),
                })
                .await
                .expect("delete");
                deleted = Some(id);
                break;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let answer = call.await.expect("task");
        tokio::time::sleep(Duration::from_millis(300)).await;
        let left = job_count(&redis, "gone").await;
        eprintln!(
            "round {round}: deleted {deleted:?}, answer ok {}, jobs left {left}",
            answer.is_ok()
        );
        if left > 0 {
            again += 1;
            let ids: Vec<String> = redis::cmd("HKEYS")
                .arg("jw:{gone}:jobs")
                .query_async(&mut watcher)
                .await
                .expect("hkeys");
            for id in ids {
                admin
                    .jobs()
                    .delete_job(pb::DeleteJobRequest {
                        queue: "gone".into(),
                        job_id: id,
                    })
                    .await
                    .expect("delete");
            }
        }
    }
    assert_eq!(
        again, 0,
        "{again} of {ROUNDS} deleted jobs were created again by the server's retry"
    );
}

/// The `job_id` a NOT_REPLICATED Enqueue names (ErrorInfo metadata, and the message).
fn named_job_id(s: &tonic::Status) -> String {
    assert_eq!(s.code(), tonic::Code::Unavailable, "{s:?}");
    let info = s
        .get_error_details()
        .error_info()
        .cloned()
        .expect("ErrorInfo");
    assert_eq!(info.reason, "NOT_REPLICATED", "{s:?}");
    let id = info
        .metadata
        .get("job_id")
        .cloned()
        .unwrap_or_else(|| panic!("no job_id in the error: {s:?}"));
    assert!(s.message().contains(&format!("{id:?}")), "{s:?}");
    id
}

/// `INFO server`'s process_id of `redis`.
async fn pid_of(redis: &RedisProc) -> u32 {
    let text: String = redis::cmd("INFO")
        .arg("server")
        .query_async(&mut redis.conn().await)
        .await
        .expect("INFO server");
    text.lines()
        .find_map(|l| l.strip_prefix("process_id:"))
        .and_then(|p| p.trim().parse().ok())
        .expect("process_id")
}

async fn job_count(redis: &RedisProc, queue: &str) -> usize {
    redis::cmd("HLEN")
        .arg(format!("jw:{{{queue}}}:jobs"))
        .query_async(&mut redis.conn().await)
        .await
        .expect("hlen")
}

/// One acknowledged Enqueue (NOT_REPLICATED, the replica SIGSTOPped) plus two retries
/// while it is stopped, and one after it is back, all with the job_id the error named: one
/// job. Then the job runs and is removed (`keep_completed = 0`), and one more retry with the
/// id (a late one) does not create it again: one run.
#[tokio::test]
async fn an_unreplicated_enqueue_without_id_names_its_job_and_retries_find_it() {
    let (master, replica, _) = crate::wait_replicas::master_and_replica().await;
    let mut cfg = test_config(&master.url);
    cfg.redis_wait_replicas = 1;
    cfg.redis_wait_timeout = Duration::from_millis(500);
    let app = TestApp::spawn(cfg).await;
    keep_nothing(&app, "nr").await;
    let pid = pid_of(&replica).await;
    crate::procs::signal(pid, "-STOP");
    let first = app
        .jobs()
        .enqueue(pb::EnqueueRequest {
            job: Some(spec("nr", "")),
        })
        .await
        .expect_err("the stopped replica acknowledges nothing");
    let id = named_job_id(&first);
    for _ in 0..2 {
        let again = app
            .jobs()
            .enqueue(pb::EnqueueRequest {
                job: Some(spec("nr", &id)),
            })
            .await
            .expect_err("still not replicated");
        assert_eq!(named_job_id(&again), id);
    }
    assert_eq!(job_count(&master, "nr").await, 1, "one job on the master");
    crate::procs::signal(pid, "-CONT");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let done = loop {
        let r = app
            .jobs()
            .enqueue(pb::EnqueueRequest {
                job: Some(spec("nr", &id)),
            })
            .await;
        match r {
            Ok(r) => break r.into_inner(),
            Err(s) if tokio::time::Instant::now() < deadline => {
                assert_eq!(named_job_id(&s), id);
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(s) => panic!("not replicated 20 s after the replica came back: {s:?}"),
        }
    };
    assert!(!done.created, "the retry found the job");
    assert_eq!(job_count(&master, "nr").await, 1, "one job");

    let worker = FastWorker::start(&app, "nr").await;
    eventually(Duration::from_secs(10), || async {
        worker.runs().contains_key(&id)
    })
    .await;
    eventually(Duration::from_secs(10), || async {
        job_count(&master, "nr").await == 0
    })
    .await;
    let late = app
        .jobs()
        .enqueue(pb::EnqueueRequest {
            job: Some(spec("nr", &id)),
        })
        .await
        .expect("a late retry answers")
        .into_inner();
    assert!(!late.created, "the job existed: not created again");
    assert_eq!(late.job.expect("job").job_id, id);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let runs = worker.stop().await;
    assert_eq!(runs.get(&id), Some(&1), "one run: {runs:?}");
    assert_eq!(job_count(&master, "nr").await, 0, "not created again");
}

/// A batch of id-less jobs whose write is not replicated answers per item (the call does
/// not fail: its jobs were written), each item naming its job's id; retries with those ids
/// find the jobs.
#[tokio::test]
async fn an_unreplicated_batch_answers_per_item_naming_each_job() {
    let (master, replica, _) = crate::wait_replicas::master_and_replica().await;
    let mut cfg = test_config(&master.url);
    cfg.redis_wait_replicas = 1;
    cfg.redis_wait_timeout = Duration::from_millis(500);
    let app = TestApp::spawn(cfg).await;
    let pid = pid_of(&replica).await;
    crate::procs::signal(pid, "-STOP");
    let r = app
        .jobs()
        .enqueue_batch(pb::EnqueueBatchRequest {
            jobs: vec![spec("nrb", ""), spec("nrb", "")],
        })
        .await;
    crate::procs::signal(pid, "-CONT");
    let results = r
        .expect("the jobs were written: the call answers per item (an SDK retries a failed call)")
        .into_inner()
        .results;
    let ids: Vec<String> = results
        .iter()
        .map(|r| {
            let e = r.error.as_ref().expect("an item error");
            assert_eq!(e.code, tonic::Code::Unavailable as i32, "{e:?}");
            let (_, rest) = e
                .message
                .split_once("job_id \"")
                .unwrap_or_else(|| panic!("no job_id in {e:?}"));
            rest.split('"').next().expect("id").to_owned()
        })
        .collect();
    assert_eq!(ids.len(), 2);
    assert_ne!(ids[0], ids[1]);
    assert_eq!(job_count(&master, "nrb").await, 2);
    eventually(Duration::from_secs(20), || async {
        app.jobs()
            .enqueue_batch(pb::EnqueueBatchRequest {
                jobs: ids.iter().map(|id| spec("nrb", id)).collect(),
            })
            .await
            .is_ok_and(|r| r.get_ref().results.iter().all(|i| i.error.is_none()))
    })
    .await;
    assert_eq!(job_count(&master, "nrb").await, 2, "the retries found both");
}
