//! The soak's verdict: one terminal state per job, none lost, none created twice, none acked
//! twice, no lease handed to a second worker while its first holder held it validly, no
//! attempt charged for a lease no worker read.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use futures::StreamExt;

use super::backend::Backend;
use super::producers::idless_payload;
use super::{Stats, QUEUE};

/// The run's figures for the summary line.
pub(super) struct Report {
    pub enqueue: Duration,
    pub drain: Duration,
    pub faults: String,
}

const TERMINAL: [&str; 3] = ["completed", "dead", "cancelled"];

async fn store(backend: &Backend) -> jobwire::store::Store {
    jobwire::store::Store::connect(backend.url(), Duration::from_secs(5))
        .await
        .expect("store")
}

async fn zcard(c: &mut redis::aio::MultiplexedConnection, set: &str) -> Option<usize> {
    redis::cmd("ZCARD")
        .arg(format!("jw:{{{QUEUE}}}:{set}"))
        .query_async(c)
        .await
        .ok()
}

/// (jobs in a terminal state, jobs still waiting, delayed or active); (0, 1) when Redis does
/// not answer.
pub(super) async fn progress(backend: &Backend) -> (usize, usize) {
    let Some(mut c) = backend.queue_conn().await else {
        return (0, 1);
    };
    let mut finished = 0;
    for set in TERMINAL {
        let Some(n) = zcard(&mut c, set).await else {
            return (0, 1);
        };
        finished += n;
    }
    let mut open = 0;
    for set in ["delayed", "active"] {
        let Some(n) = zcard(&mut c, set).await else {
            return (0, 1);
        };
        open += n;
    }
    let queue = jobwire::jobs::QueueName::parse(QUEUE).expect("queue");
    match store(backend).await.waiting_ids(&queue).await {
        Ok(w) => (finished, open + w.len()),
        Err(_) => (0, 1),
    }
}

/// Asserts the soak's promises; prints its figures.
pub(super) async fn check(backend: &Backend, ids: &[String], stats: &Stats, report: Report) {
    let jobs = ids.len();
    let mut c = backend.queue_conn().await.expect("queue's node");
    let store = store(backend).await;
    let queue = jobwire::jobs::QueueName::parse(QUEUE).expect("queue");
    let mut where_: HashMap<String, Vec<&str>> = HashMap::new();
    for set in [
        "waiting",
        "delayed",
        "active",
        "completed",
        "dead",
        "cancelled",
    ] {
        let members: Vec<String> = if set == "waiting" {
            store.waiting_ids(&queue).await.expect("waiting ids")
        } else {
            redis::cmd("ZRANGE")
                .arg(format!("jw:{{{QUEUE}}}:{set}"))
                .arg(0)
                .arg(-1)
                .query_async(&mut c)
                .await
                .expect("zrange")
        };
        for m in members {
            where_.entry(m).or_default().push(set);
        }
    }
    let mut counts: HashMap<&str, usize> = HashMap::new();
    for (id, sets) in &where_ {
        match sets.as_slice() {
            [s] if TERMINAL.contains(s) => *counts.entry(s).or_default() += 1,
            other => panic!("job {id} is in {other:?}, not exactly one terminal state"),
        }
    }
    for id in ids {
        assert!(where_.contains_key(id), "job {id} was lost");
    }

    // Id-less Enqueues: every acknowledged one has its job; no payload is in two jobs; a job
    // the soak did not name is an id-less one (acknowledged, or of unknown outcome).
    let (acknowledged, unknown) = {
        let i = stats.idless.lock().expect("idless");
        (i.acknowledged.clone(), i.unknown.clone())
    };
    let named: std::collections::HashSet<&str> = ids.iter().map(String::as_str).collect();
    let others: Vec<String> = where_
        .keys()
        .filter(|id| !named.contains(id.as_str()))
        .cloned()
        .collect();
    let payloads: Vec<(String, Vec<u8>)> = futures::stream::iter(others)
        .map(|id| {
            let (store, queue) = (store.clone(), queue.clone());
            async move {
                let job = store.get_job(&queue, &id).await.expect("get job");
                (id, job.map(|j| j.payload).unwrap_or_default())
            }
        })
        .buffer_unordered(32)
        .collect()
        .await;
    let mut by_payload: HashMap<Vec<u8>, Vec<String>> = HashMap::new();
    for (id, payload) in payloads {
        by_payload.entry(payload).or_default().push(id);
    }
    let mut idless_unknown_created = 0;
    for (n, id) in &acknowledged {
        let holders = by_payload.remove(&idless_payload(*n)).unwrap_or_default();
        assert_eq!(
            holders,
            vec![id.clone()],
            "id-less Enqueue {n} was answered with job {id}: exactly that job must exist"
        );
    }
    for n in &unknown {
        if let Some(holders) = by_payload.remove(&idless_payload(*n)) {
            assert_eq!(
                holders.len(),
                1,
                "id-less Enqueue {n} (answered with an error) created {holders:?}"
            );
            idless_unknown_created += 1;
        }
    }
    assert!(
        by_payload.is_empty(),
        "jobs no Enqueue accounts for: {:?}",
        by_payload.values().take(10).collect::<Vec<_>>()
    );

    let acks = stats.acks.lock().expect("acks").clone();
    let twice: Vec<_> = acks.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "jobs acked successfully twice: {twice:?}");

    let streams = stats.streams.lock().expect("streams").clone();
    let killed = stats.killed.lock().expect("killed").clone();
    let shut_down = stats.shut_down.lock().expect("shut down").clone();

    // One attempt, one holder: a lease is handed to another worker with the same attempt
    // number only when it went back uncharged. For a lease a worker read that may happen only
    // when the first holder's replica was SIGKILLed (its unconfirmed lease calls are
    // released) or shut down (it hands its streams' leases back), or when a Redis fault kept
    // the lease from being renewed or its call from being confirmed (it expired meanwhile);
    // any other pair is a job run twice under a valid lease.
    let handed_back_by_server = |worker: &str| {
        streams
            .get(worker)
            .is_some_and(|(a, _)| killed.contains(a) || shut_down.contains(a))
    };
    let windows = stats.fault_windows.lock().expect("windows").clone();
    let in_fault = |from: Instant, to: Instant| windows.iter().any(|(s, e)| *s <= to && from <= *e);
    let readers = stats.attempt_readers.lock().expect("readers").clone();
    let mut run_twice = Vec::new();
    let mut excused = 0;
    for ((id, attempt), reads) in &readers {
        for pair in reads.windows(2) {
            let ((first, t1), (_, t2)) = (&pair[0], &pair[1]);
            if handed_back_by_server(first) || in_fault(*t1, *t2) {
                excused += 1;
            } else {
                let who: Vec<_> = reads.iter().map(|(w, t)| (w, *t - *t1)).collect();
                run_twice.push((id.clone(), *attempt, who));
                break;
            }
        }
    }
    assert!(
        run_twice.is_empty(),
        "{} job attempts were read by a second worker while the first still held them, with \
         no fault between (job, attempt, readers and when after the first): {:?}",
        run_twice.len(),
        &run_twice[..run_twice.len().min(20)]
    );

    // Attempts charged against leases read: no attempt for a lease no worker read.
    let deliveries = stats.deliveries.lock().expect("d").clone();
    let attempts: Vec<(String, u32, String)> = futures::stream::iter(ids.iter().cloned())
        .map(|id| {
            let (store, queue) = (store.clone(), queue.clone());
            async move {
                let job = store.get_job(&queue, &id).await.expect("get job");
                // Its state first, then its attempts' errors.
                let errors = job.as_ref().map_or(String::new(), |j| {
                    std::iter::once(format!("{:?}", j.state))
                        .chain(
                            j.errors
                                .iter()
                                .map(|e| format!("{}:{}@{}", e.attempt, e.error_type, e.worker_id)),
                        )
                        .collect::<Vec<_>>()
                        .join(" ")
                });
                (id, job.map_or(0, |j| j.attempts_made), errors)
            }
        })
        .buffer_unordered(32)
        .collect()
        .await;
    let mut overcharged = Vec::new();
    for (id, made, errors) in &attempts {
        let read = deliveries.get(id).copied().unwrap_or(0);
        if *made > read {
            overcharged.push((id.clone(), *made, read, errors.clone()));
        }
    }
    let unseen = stats.unreported_kills.load(Ordering::Relaxed) as usize;
    // Attempts charged unseen because the replica holding the lease was SIGKILLed: per job
    // and stream opened on a killed replica, its LEASE_EXPIRED attempts beyond the leases of
    // the job that stream read.
    let read_by = stats.read_by.lock().expect("read by").clone();
    let on_killed = |worker: &str| streams.get(worker).filter(|(a, _)| killed.contains(a));
    let mut lost_with_replica: HashMap<String, u32> = HashMap::new();
    let mut excess = 0;
    for (id, made, read, errors) in &overcharged {
        let mut expired: HashMap<&str, u32> = HashMap::new();
        for e in errors.split(' ') {
            if let Some((_, worker)) = e.split_once(":LEASE_EXPIRED@") {
                if on_killed(worker).is_some() {
                    *expired.entry(worker).or_default() += 1;
                }
            }
        }
        let mut over = made - read;
        for (worker, n) in expired {
            let seen = read_by
                .get(&(id.clone(), worker.to_owned()))
                .copied()
                .unwrap_or(0);
            let lost = n.saturating_sub(seen).min(over);
            over -= lost;
            if lost > 0 {
                *lost_with_replica.entry(worker.to_owned()).or_default() += lost;
            }
        }
        excess += over;
    }
    for (worker, n) in &lost_with_replica {
        let credits = on_killed(worker).map_or(0, |(_, c)| *c);
        assert!(
            *n <= credits,
            "{n} attempts charged to stream {worker} on the killed replica, past its {credits} credits"
        );
    }
    let lost: u32 = lost_with_replica.values().sum();
    if excess as usize > unseen {
        for (id, ..) in overcharged.iter().take(20) {
            let by: Vec<_> = read_by.iter().filter(|((j, _), _)| j == id).collect();
            println!("soak: job {id} read by {by:?}");
        }
    }
    assert!(
        excess as usize <= unseen,
        "jobs charged attempts for leases no worker read ({excess} attempts besides {lost} lost \
         with the SIGKILLed replica, at most {unseen} could be in killed children): (id, \
         attempts, leases read, attempt:error@worker) {:?}",
        &overcharged[..overcharged.len().min(20)]
    );
    let delivered: u32 = deliveries.values().sum();
    let fails = stats.fails.load(Ordering::Relaxed) as usize;
    let total = jobs + acknowledged.len() + idless_unknown_created;
    println!(
        "soak: jobs {total} ({jobs} named, {} id-less acknowledged, {} id-less answered with an \
         error of which {idless_unknown_created} exist once), completed {}, dead {}, cancelled \
         {} ({} CancelJob calls took effect), lost 0, created twice 0, deliveries {delivered}, \
         re-deliveries {} ({} not asked for by a worker Fail), same attempt read by two workers \
         0 ({excused} after the holder's replica was killed or shut down, or across a fault), attempts charged \
         beyond leases read {excess} (children killed unseen {unseen}) plus {lost} lost unsent \
         with the SIGKILLed replica ({} of its streams), worker fails {fails}, hangs {}, worker \
         SIGKILLs {}, reader stalls {}, faults: {}; enqueue phase {:?}, drain {:?}",
        acknowledged.len(),
        unknown.len(),
        counts.get("completed").copied().unwrap_or(0),
        counts.get("dead").copied().unwrap_or(0),
        counts.get("cancelled").copied().unwrap_or(0),
        stats.cancels.load(Ordering::Relaxed),
        (delivered as usize).saturating_sub(total),
        (delivered as usize).saturating_sub(total + fails),
        lost_with_replica.len(),
        stats.hangs.load(Ordering::Relaxed),
        stats.kills.load(Ordering::Relaxed),
        stats.stalls.load(Ordering::Relaxed),
        report.faults,
        report.enqueue,
        report.drain,
    );
}
