//! Group commit of unary Enqueue (`src/lease/enqueue_commit.rs`): concurrent Enqueues of a
//! queue go in one `enqueue.lua` call, and each caller still gets exactly its own answer.
//! To make them meet in one call for sure, Redis is paused (`CLIENT PAUSE ... WRITE`)
//! while they arrive: the first call waits in Redis, everything after it queues in the
//! lane. The calls are counted on the queue's wake-up channel: every enqueue call that
//! makes jobs ready PUBLISHes exactly once.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use futures::StreamExt;
use jobwire::pb;

use crate::harness::*;

/// How long Redis holds writes while the concurrent Enqueues arrive (well inside the test
/// config's 3 s Redis timeout, so no call times out).
const HOLD_MS: u64 = 800;

async fn pause_writes(redis: &TestRedis, ms: u64, what: &str) {
    let mut c = redis.conn().await;
    let _: redis::Value = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(ms)
        .arg(what)
        .query_async(&mut c)
        .await
        .expect("client pause");
}

/// Counts the enqueue calls of `queue` that made jobs ready (their PUBLISHes), from the
/// subscription to now: a marker published after them ends the count.
struct CallCounter {
    messages: futures::stream::BoxStream<'static, redis::Msg>,
    channel: String,
}

impl CallCounter {
    async fn start(redis: &TestRedis, queue: &str) -> CallCounter {
        let client = redis::Client::open(redis.url.as_str()).expect("url");
        let mut pubsub = client.get_async_pubsub().await.expect("pubsub");
        let channel = format!("jw:wake:{queue}");
        pubsub.subscribe(&channel).await.expect("subscribe");
        CallCounter {
            messages: pubsub.into_on_message().boxed(),
            channel,
        }
    }

    async fn count(mut self, redis: &TestRedis) -> usize {
        let mut c = redis.conn().await;
        let _: i64 = redis::cmd("PUBLISH")
            .arg(&self.channel)
            .arg("end")
            .query_async(&mut c)
            .await
            .expect("publish");
        let mut n = 0;
        while let Some(m) = self.messages.next().await {
            if m.get_payload::<String>().expect("payload") == "end" {
                return n;
            }
            n += 1;
        }
        panic!("the subscription ended");
    }
}

fn job(queue: &str, id: &str, payload: &str) -> pb::JobSpec {
    pb::JobSpec {
        payload: payload.as_bytes().to_vec(),
        ..spec(queue, id)
    }
}

async fn waiting_ids(redis: &TestRedis, queue: &str) -> Vec<String> {
    let mut c = redis.conn().await;
    redis::cmd("LRANGE")
        .arg(format!("jw:{{{queue}}}:waiting"))
        .arg(0)
        .arg(-1)
        .query_async(&mut c)
        .await
        .expect("lrange")
}

/// Producers each enqueue their jobs one after another, all producers at once, half with
/// ids of their own and half with ids the server chooses: every job lands once, with the
/// answer its caller expects, and each producer's jobs wait in its order.
#[tokio::test]
async fn concurrent_enqueues_land_once_each_in_each_callers_order() {
    const PRODUCERS: usize = 32;
    const EACH: usize = 12;
    let (redis, app) = TestApp::with_redis().await;
    let q = "gc-order";
    enqueue(&app, job(q, "warm-up", "w")).await;
    let tasks: Vec<_> = (0..PRODUCERS)
        .map(|p| {
            let mut jobs = app.jobs();
            tokio::spawn(async move {
                let mut ids = Vec::new();
                for k in 0..EACH {
                    let own = if p % 2 == 0 {
                        format!("p{p}-{k}")
                    } else {
                        String::new()
                    };
                    let payload = format!("p{p}-{k}");
                    let r = jobs
                        .enqueue(pb::EnqueueRequest {
                            job: Some(job(q, &own, &payload)),
                        })
                        .await
                        .expect("enqueue")
                        .into_inner();
                    let got = r.job.expect("job");
                    assert!(r.created, "{payload} is new");
                    assert_eq!(got.payload, payload.as_bytes(), "{payload}: its own job");
                    if !own.is_empty() {
                        assert_eq!(got.job_id, own);
                    }
                    ids.push(got.job_id);
                }
                ids
            })
        })
        .collect();
    let mut by_producer = Vec::new();
    for t in tasks {
        by_producer.push(t.await.expect("producer"));
    }
    let waiting = waiting_ids(&redis, q).await;
    assert_eq!(waiting.len(), 1 + PRODUCERS * EACH, "every job once");
    let at: HashMap<&str, usize> = waiting
        .iter()
        .enumerate()
        .map(|(i, id)| (id.as_str(), i))
        .collect();
    assert_eq!(at.len(), waiting.len(), "no id twice");
    for ids in &by_producer {
        let places: Vec<usize> = ids.iter().map(|id| at[id.as_str()]).collect();
        assert!(
            places.windows(2).all(|w| w[0] < w[1]),
            "a producer's jobs wait in its order: {ids:?} at {places:?}"
        );
    }
}

/// Enqueues that arrive while a call of their queue is in flight share the next call:
/// 60 callers, a few calls, each caller its own job.
#[tokio::test]
async fn enqueues_arriving_during_a_call_share_the_next_one() {
    if single_only("counts the calls on the single Redis's wake-up channel") {
        return;
    }
    const CALLERS: usize = 60;
    let (redis, app) = TestApp::with_redis().await;
    let q = "gc-share";
    enqueue(&app, job(q, "warm-up", "w")).await;
    let counter = CallCounter::start(&redis, q).await;
    pause_writes(&redis, HOLD_MS, "WRITE").await;
    let calls: Vec<_> = (0..CALLERS)
        .map(|i| {
            let mut jobs = app.jobs();
            tokio::spawn(async move {
                let r = jobs
                    .enqueue(pb::EnqueueRequest {
                        job: Some(job(q, &format!("s{i}"), &format!("payload {i}"))),
                    })
                    .await
                    .expect("enqueue")
                    .into_inner();
                let got = r.job.expect("job");
                assert!(r.created);
                assert_eq!(got.job_id, format!("s{i}"));
                assert_eq!(got.payload, format!("payload {i}").as_bytes());
            })
        })
        .collect();
    for c in calls {
        c.await.expect("caller");
    }
    let n = counter.count(&redis).await;
    println!("{CALLERS} enqueues in {n} calls");
    assert!(
        (1..=CALLERS / 4).contains(&n),
        "{CALLERS} enqueues took {n} calls"
    );
    assert_eq!(waiting_ids(&redis, q).await.len(), 1 + CALLERS);
}

/// In one coalesced call: a job whose id is taken by a record that does not decode fails
/// its caller (INTERNAL) and no one else; a spec that does not validate fails its caller
/// before it joins; two callers with the same id (the idempotency key) get one job, the
/// same one, created for exactly one of them.
#[tokio::test]
async fn a_bad_job_fails_only_its_caller_and_duplicates_in_one_call_resolve_to_one_job() {
    let (redis, app) = TestApp::with_redis().await;
    let q = "gc-bad";
    enqueue(&app, job(q, "warm-up", "w")).await;
    let mut c = redis.conn().await;
    let _: i64 = redis::cmd("HSET")
        .arg(format!("jw:{{{q}}}:jobs"))
        .arg("broken")
        .arg("not a record")
        .query_async(&mut c)
        .await
        .expect("hset");
    let good: Vec<_> = (0..10).map(|i| job(q, &format!("g{i}"), "good")).collect();
    let mut specs: Vec<(String, pb::JobSpec)> = Vec::new();
    for (i, s) in good.into_iter().enumerate() {
        specs.push((format!("good {i}"), s));
        if i == 3 {
            specs.push(("broken".into(), job(q, "broken", "x")));
            specs.push(("dup a".into(), job(q, "dup", "from a")));
            specs.push((
                "invalid".into(),
                pb::JobSpec {
                    name: String::new(),
                    ..job(q, "inv", "x")
                },
            ));
            specs.push(("dup b".into(), job(q, "dup", "from b")));
        }
    }
    pause_writes(&redis, HOLD_MS, "WRITE").await;
    let calls: Vec<_> = specs
        .into_iter()
        .map(|(label, s)| {
            let mut jobs = app.jobs();
            tokio::spawn(async move {
                let r = jobs.enqueue(pb::EnqueueRequest { job: Some(s) }).await;
                (label, r.map(|r| r.into_inner()))
            })
        })
        .collect();
    let mut dups = Vec::new();
    for c in calls {
        let (label, r) = c.await.expect("caller");
        match label.as_str() {
            "broken" => {
                let s = r.expect_err("the undecodable record fails its caller");
                assert_eq!(s.code(), tonic::Code::Internal, "{s:?}");
            }
            "invalid" => {
                let s = r.expect_err("a job with no name is refused");
                assert_eq!(s.code(), tonic::Code::InvalidArgument, "{s:?}");
            }
            l if l.starts_with("dup") => dups.push(r.expect("a duplicate is no error")),
            l => {
                let r = r.unwrap_or_else(|s| panic!("{l}: {s:?}"));
                assert!(r.created, "{l}");
                assert_eq!(r.job.expect("job").payload, b"good");
            }
        }
    }
    assert_eq!(dups.len(), 2);
    assert_eq!(
        dups.iter().filter(|d| d.created).count(),
        1,
        "one of the two created it"
    );
    let jobs: Vec<pb::Job> = dups.into_iter().map(|d| d.job.expect("job")).collect();
    assert_eq!(jobs[0].job_id, "dup");
    assert_eq!(jobs[0].payload, jobs[1].payload, "the same job for both");
    assert_eq!(
        jobs[0].create_time, jobs[1].create_time,
        "the same job for both"
    );
    let waiting: HashSet<String> = waiting_ids(&redis, q).await.into_iter().collect();
    assert!(waiting.contains("dup") && !waiting.contains("inv") && !waiting.contains("broken"));
    assert_eq!(
        waiting.len(),
        1 + 10 + 1,
        "warm-up, the good ones and one dup"
    );
}

/// Redis stalls past the server's Redis timeout while a coalesced call is in flight (it
/// times out, then runs when Redis comes back): callers with server-chosen ids are
/// retried by the server with the same ids and answered created; callers with ids of
/// their own get UNAVAILABLE and retry, as clients do. Nothing is lost, nothing doubled.
#[tokio::test]
async fn a_redis_stall_during_a_coalesced_call_loses_and_doubles_nothing() {
    const CALLERS: usize = 40;
    let redis = TestRedis::start().await;
    let mut cfg = test_config(&redis.url);
    cfg.redis_timeout = Duration::from_millis(400);
    let app = TestApp::spawn(cfg).await;
    let q = "gc-stall";
    enqueue(&app, job(q, "warm-up", "w")).await;
    pause_writes(&redis, 1500, "ALL").await;
    let calls: Vec<_> = (0..CALLERS)
        .map(|i| {
            let mut jobs = app.jobs();
            tokio::spawn(async move {
                let own = if i % 2 == 0 {
                    format!("own-{i}")
                } else {
                    String::new()
                };
                let payload = format!("stall {i}");
                let mut tries = 0;
                loop {
                    tries += 1;
                    let r = jobs
                        .enqueue(pb::EnqueueRequest {
                            job: Some(job(q, &own, &payload)),
                        })
                        .await;
                    match r {
                        Ok(r) => {
                            let r = r.into_inner();
                            let got = r.job.expect("job");
                            assert_eq!(got.payload, payload.as_bytes());
                            if own.is_empty() {
                                assert!(r.created, "a server-chosen id is reported created");
                            } else {
                                assert_eq!(got.job_id, own);
                            }
                            return got.job_id;
                        }
                        Err(s) if s.code() == tonic::Code::Unavailable && !own.is_empty() => {
                            assert!(tries < 100, "{own}: still unavailable");
                            tokio::time::sleep(Duration::from_millis(100)).await;
                        }
                        Err(s) => panic!("{i}: {s:?}"),
                    }
                }
            })
        })
        .collect();
    let mut ids = HashSet::new();
    for c in calls {
        assert!(ids.insert(c.await.expect("caller")), "one id per caller");
    }
    let mut c = redis.conn().await;
    let stored: usize = redis::cmd("HLEN")
        .arg(format!("jw:{{{q}}}:jobs"))
        .query_async(&mut c)
        .await
        .expect("hlen");
    assert_eq!(stored, 1 + CALLERS, "every job once");
    let waiting: HashSet<String> = waiting_ids(&redis, q).await.into_iter().collect();
    assert_eq!(waiting.len(), 1 + CALLERS, "every job waits once");
    assert!(ids.iter().all(|id| waiting.contains(id)));
}
