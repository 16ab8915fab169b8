//! A model-based property test of the Lua state machine against a real Redis: random
//! sequences of enqueue / lease / ack / fail / expire / release / replay / delete / cancel /
//! delete job / expiry (issue 16), over jobs of three groups (the default group and two
//! named ones, issue 16), driven
//! through `jobwire::store::Store`, are checked after every step against a small in-memory
//! model. Invariants: every job is in exactly one state set and its record agrees; the waiting
//! order is priority then FIFO; counts are conserved; attempts never exceed the limit; a
//! stale token changes nothing; a cancelled job never runs again (an active one ends
//! CANCELLED at its holder's Fail, release or lease expiry, COMPLETED at its Ack); a job
//! past its expire time ends EXPIRED at the lease or the reap that finds it, unless it was
//! leased before; the groups take turns exactly as the stride scheduling of
//! `store/scripts/groups.lua` says (passes, virtual time, ties), and the per-group counts,
//! passes and waiting index in Redis match the model.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use jobwire::jobs::{Disposition, NewJob, QueueName};
use jobwire::store::{CancelOutcome, DeadSelector, DeletedJob, FailItem, Settle, Store};
use proptest::prelude::*;

use crate::harness::{RawConn, TestRedis};

const SETS: [&str; 7] = [
    "waiting",
    "delayed",
    "active",
    "completed",
    "dead",
    "cancelled",
    "expired",
];

#[derive(Clone, Debug)]
enum Op {
    Enqueue {
        id: u8,
        max: u32,
        pri: i32,
        delayed: bool,
        /// Enqueued with an expire time (an hour ahead: it is made due by `Due`).
        ttl: bool,
        /// Its group: 0 the default group, 1 "ga", 2 "gb".
        group: u8,
    },
    /// Makes the expiry of job `id` due now (its entry in the expiry index; the header
    /// keeps its time), as if the hour had passed.
    Due {
        id: u8,
    },
    Cancel {
        id: u8,
    },
    DeleteJob {
        id: u8,
    },
    Lease {
        n: usize,
    },
    Ack {
        pick: usize,
        stale: bool,
    },
    Fail {
        pick: usize,
        how: u8,
        stale: bool,
    },
    Expire {
        pick: usize,
    },
    Release {
        pick: usize,
    },
    Replay {
        id: u8,
    },
    Delete {
        id: u8,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0u8..10, 1u32..4, prop_oneof![Just(0), Just(5)], prop::bool::weighted(0.1), prop::bool::weighted(0.3), 0u8..3)
            .prop_map(|(id, max, pri, delayed, ttl, group)| Op::Enqueue { id, max, pri, delayed, ttl, group }),
        1 => (0u8..10).prop_map(|id| Op::Due { id }),
        2 => (0u8..10).prop_map(|id| Op::Cancel { id }),
        1 => (0u8..10).prop_map(|id| Op::DeleteJob { id }),
        3 => (1usize..4).prop_map(|n| Op::Lease { n }),
        2 => (any::<usize>(), prop::bool::weighted(0.2)).prop_map(|(pick, stale)| Op::Ack { pick, stale }),
        2 => (any::<usize>(), 0u8..3, prop::bool::weighted(0.2))
            .prop_map(|(pick, how, stale)| Op::Fail { pick, how, stale }),
        2 => any::<usize>().prop_map(|pick| Op::Expire { pick }),
        1 => any::<usize>().prop_map(|pick| Op::Release { pick }),
        1 => (0u8..10).prop_map(|id| Op::Replay { id }),
        1 => (0u8..10).prop_map(|id| Op::Delete { id }),
    ]
}

#[derive(Clone, Debug)]
struct MJob {
    state: &'static str,
    att: u32,
    max: u32,
    pri: i32,
    token: String,
    old_tokens: Vec<String>,
    /// In the expiry index: enqueued with an expire time and never leased.
    expiry: bool,
    /// Its expiry is due (`Op::Due`).
    due: bool,
    /// Active with a cancel pending.
    pending: bool,
    /// Its group key ("" the default group).
    group: String,
}

#[derive(Default)]
struct Model {
    jobs: BTreeMap<String, MJob>,
    /// (priority, ready sequence, id): leased highest priority first, then FIFO.
    waiting: Vec<(i32, u64, String)>,
    seq: u64,
    created: u32,
    deleted: u32,
    /// Tokens whose ack, or fail, was applied: repeating one answers OK.
    acked: std::collections::HashSet<String>,
    failed: std::collections::HashSet<String>,
    /// The groups' turns (groups.lua): the virtual time, the default group's pass, and the
    /// pass of each named group with waiting jobs (weight 1: +1 a lease).
    vt: f64,
    gd: f64,
    ready: BTreeMap<String, f64>,
}

impl Model {
    fn make_ready(&mut self, id: &str) {
        let j = self.jobs.get_mut(id).expect("job");
        j.state = "waiting";
        self.seq += 1;
        self.waiting.push((j.pri, self.seq, id.to_owned()));
        self.waiting.sort_by_key(|(p, s, _)| (-p, *s));
        let g = j.group.clone();
        if !g.is_empty() && !self.ready.contains_key(&g) {
            self.ready.insert(g, self.vt);
        }
    }

    fn group_of(&self, id: &str) -> &str {
        &self.jobs[id].group
    }

    /// The ids a lease call pops, in order, as lease.lua does: with no named group waiting,
    /// the first `n` (priority, then FIFO); else one at a time from the default group or the
    /// named group of lowest pass (ties: the default group, then by name), until `n` are
    /// leased (`leasable` says whether a popped job takes a slot: an expired one does not).
    fn lease_order(&mut self, n: usize, leasable: impl Fn(&Model, &str) -> bool) -> Vec<String> {
        if !self
            .waiting
            .iter()
            .any(|(_, _, id)| !self.group_of(id).is_empty())
        {
            let take = n.min(self.waiting.len());
            return self.waiting.drain(..take).map(|(_, _, id)| id).collect();
        }
        let (mut vt, mut gd) = (self.vt, self.gd);
        let mut popped = Vec::new();
        let mut slots = 0;
        while slots < n {
            let default_head = self
                .waiting
                .iter()
                .position(|(_, _, id)| self.group_of(id).is_empty());
            let named = self
                .ready
                .iter()
                .min_by(|a, b| a.1.total_cmp(b.1).then(a.0.cmp(b.0)))
                .map(|(g, p)| (g.clone(), *p));
            let pd = gd.max(vt);
            let at = match (default_head, &named) {
                (None, None) => break,
                (Some(i), None) => {
                    (vt, gd) = (pd, pd + 1.0);
                    i
                }
                (Some(i), Some((_, pass))) if pd <= *pass => {
                    (vt, gd) = (pd, pd + 1.0);
                    i
                }
                (_, Some((g, pass))) => {
                    vt = *pass;
                    let i = self
                        .waiting
                        .iter()
                        .position(|(_, _, id)| self.group_of(id) == g)
                        .expect("a ready group has waiting jobs");
                    let left = self
                        .waiting
                        .iter()
                        .filter(|(_, _, id)| self.group_of(id) == g)
                        .count();
                    if left > 1 {
                        self.ready.insert(g.clone(), pass + 1.0);
                    } else {
                        self.ready.remove(g);
                    }
                    i
                }
            };
            let (_, _, id) = self.waiting.remove(at);
            if leasable(self, &id) {
                slots += 1;
            }
            popped.push(id);
        }
        (self.vt, self.gd) = (vt, gd);
        popped
    }

    /// The active job `pick` selects, with the token to present (current or stale).
    fn pick_active(&self, pick: usize, stale: bool) -> Option<(String, String)> {
        let active: Vec<(&String, &MJob)> = self
            .jobs
            .iter()
            .filter(|(_, j)| j.state == "active")
            .collect();
        if stale {
            let with_old: Vec<(&String, &MJob)> = self
                .jobs
                .iter()
                .filter(|(_, j)| !j.old_tokens.is_empty())
                .collect();
            let (id, j) = with_old.get(pick % with_old.len().max(1))?;
            return Some((
                (*id).clone(),
                j.old_tokens[pick % j.old_tokens.len()].clone(),
            ));
        }
        let (id, j) = active.get(pick % active.len().max(1))?;
        Some(((*id).clone(), j.token.clone()))
    }

    /// Ends the current attempt of `id` as failed (no backoff: straight back to waiting).
    fn fail_attempt(&mut self, id: &str, how: u8) {
        let j = self.jobs.get_mut(id).expect("job");
        j.old_tokens.push(std::mem::take(&mut j.token));
        if j.pending {
            // A cancel is pending: whatever the disposition, CANCELLED (a rate-limited
            // return still gives its attempt back).
            if how == 2 {
                j.att -= 1;
            }
            j.state = "cancelled";
            j.pending = false;
            return;
        }
        match how {
            1 => j.state = "dead",
            2 => {
                j.att -= 1;
                self.make_ready(id);
            }
            _ if j.att >= j.max => j.state = "dead",
            _ => self.make_ready(id),
        }
    }

    /// Takes `id` out of the waiting order (if it is there); a named group left without
    /// waiting jobs leaves the turns.
    fn unwait(&mut self, id: &str) {
        self.waiting.retain(|(_, _, w)| w != id);
        let g = self
            .jobs
            .get(id)
            .map(|j| j.group.clone())
            .unwrap_or_default();
        if !g.is_empty() && !self.waiting.iter().any(|(_, _, w)| self.group_of(w) == g) {
            self.ready.remove(&g);
        }
    }

    /// What a settle with (id, token) must answer: Ok, or the LEASE_LOST state, or None
    /// for NOT_FOUND.
    fn expect_settle(&self, id: &str, token: &str) -> Option<Result<(), String>> {
        let j = self.jobs.get(id)?;
        if j.state == "active" && j.token == token {
            Some(Ok(()))
        } else {
            Some(Err(j.state.to_owned()))
        }
    }
}

fn settled<T>(s: &Settle<T>) -> Option<Result<(), String>> {
    match s {
        Settle::Done(_) => Some(Ok(())),
        Settle::LeaseLost(state) => Some(Err(state.clone())),
        Settle::NotFound => None,
    }
}

async fn apply(store: &Store, q: &QueueName, redis: &mut RawConn, m: &mut Model, op: &Op) {
    match op.clone() {
        Op::Enqueue {
            id,
            max,
            pri,
            delayed,
            ttl,
            group,
        } => {
            let id = format!("j{id}");
            let group = ["", "ga", "gb"][group as usize].to_string();
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .expect("clock")
                .as_millis() as u64;
            let job = NewJob {
                queue: q.clone(),
                id: id.clone(),
                name: "m".into(),
                payload: Vec::new(),
                content_type: String::new(),
                metadata: BTreeMap::new(),
                delay_ms: if delayed { 3_600_000 } else { 0 },
                priority: pri,
                max_attempts: Some(max),
                backoff: None,
                timeout_ms: None,
                group_key: group.clone(),
                expire_ms: if ttl { now + 3_600_000 } else { 0 },
            };
            let out = store.enqueue(q, &[job], 1).await.expect("enqueue");
            assert_eq!(out[0].created, !m.jobs.contains_key(&id), "dedupe of {id}");
            if out[0].created {
                m.created += 1;
                let j = MJob {
                    state: "delayed",
                    att: 0,
                    max,
                    pri,
                    token: String::new(),
                    old_tokens: vec![],
                    expiry: ttl,
                    due: false,
                    pending: false,
                    group,
                };
                m.jobs.insert(id.clone(), j);
                if !delayed {
                    m.make_ready(&id);
                }
            }
        }
        Op::Lease { n } => {
            let workers = vec!["w"; n];
            let call = jobwire::store::new_lease_call_id();
            let batch = store
                .lease(q, &workers, 60_000, &call, &[])
                .await
                .expect("lease");
            // The reply arrived: the leases count as delivered (expiry charges them).
            store
                .confirm_lease_calls(q, &[call])
                .await
                .expect("confirm");
            let popped = m.lease_order(n, |m, id| {
                let j = &m.jobs[id];
                !(j.expiry && j.due)
            });
            // A popped job whose expiry is due expires there, without a slot.
            let mut want = Vec::new();
            let mut expired = 0;
            for id in popped {
                let j = m.jobs.get_mut(&id).expect("job");
                if j.expiry && j.due {
                    j.state = "expired";
                    j.expiry = false;
                    expired += 1;
                } else {
                    j.expiry = false;
                    want.push(id);
                }
            }
            assert_eq!(batch.expired, expired, "expired at lease time");
            let got: Vec<&str> = batch.jobs.iter().map(|l| l.job.id.as_str()).collect();
            assert_eq!(got, want, "lease order: priority, then FIFO");
            for l in batch.jobs {
                let j = m.jobs.get_mut(&l.job.id).expect("job");
                j.att += 1;
                j.state = "active";
                j.token = l.token.clone();
                assert_eq!(l.attempt, j.att);
            }
        }
        Op::Ack { pick, stale } => {
            let Some((id, token)) = m.pick_active(pick, stale) else {
                return;
            };
            // A token whose ack was applied answers OK again and changes nothing.
            let repeat = m.acked.contains(&token);
            let want = if repeat {
                Some(Ok(()))
            } else {
                m.expect_settle(&id, &token)
            };
            let r = store
                .ack(q, &[(id.clone(), token.clone())])
                .await
                .expect("ack");
            assert_eq!(settled(&r[0]), want, "ack {id}");
            if want == Some(Ok(())) && !repeat {
                m.acked.insert(token);
                let j = m.jobs.get_mut(&id).expect("job");
                j.state = "completed";
                j.pending = false;
                j.old_tokens.push(std::mem::take(&mut j.token));
            }
        }
        Op::Fail { pick, how, stale } => {
            let Some((id, token)) = m.pick_active(pick, stale) else {
                return;
            };
            // A token whose fail was applied answers OK again and changes nothing.
            let repeat = m.failed.contains(&token);
            let want = if repeat {
                Some(Ok(()))
            } else {
                m.expect_settle(&id, &token)
            };
            let disposition = [
                Disposition::Retry,
                Disposition::NoRetry,
                Disposition::RateLimited,
            ][how as usize];
            let item = FailItem {
                id: id.clone(),
                token: token.clone(),
                disposition,
                message: "boom".into(),
                error_type: "E".into(),
                details: String::new(),
                retry_after_ms: (how == 2).then_some(0),
                pause_queue: false,
                pause_group: false,
            };
            let r = store.fail(q, &[item]).await.expect("fail");
            assert_eq!(settled(&r[0]), want, "fail {id}");
            if want == Some(Ok(())) && !repeat {
                m.failed.insert(token);
                m.fail_attempt(&id, how);
            }
        }
        Op::Expire { pick } => {
            let Some((id, _)) = m.pick_active(pick, false) else {
                return;
            };
            let active = format!("jw:{{{q}}}:active");
            let _: i64 = redis::cmd("ZADD")
                .arg(&active)
                .arg("XX")
                .arg(1)
                .arg(&id)
                .query_async(redis)
                .await
                .expect("zadd");
            let report = store.reap(q, 100).await.expect("reap");
            assert_eq!(report.reaped.len(), 1, "only the expired lease is reaped");
            m.fail_attempt(&id, 0);
            // The reap also expires the waiting and delayed jobs whose expiry is due.
            let due: Vec<String> = m
                .jobs
                .iter()
                .filter(|(_, j)| j.expiry && j.due && matches!(j.state, "waiting" | "delayed"))
                .map(|(id, _)| id.clone())
                .collect();
            assert_eq!(report.expired, due.len() as u64, "expired by the reaper");
            for id in due {
                m.unwait(&id);
                let j = m.jobs.get_mut(&id).expect("job");
                j.state = "expired";
                j.expiry = false;
            }
        }
        Op::Release { pick } => {
            let Some((id, token)) = m.pick_active(pick, false) else {
                return;
            };
            assert_eq!(
                store
                    .release(q, &[(id.clone(), token)])
                    .await
                    .expect("release"),
                1
            );
            let j = m.jobs.get_mut(&id).expect("job");
            j.att -= 1;
            j.old_tokens.push(std::mem::take(&mut j.token));
            if j.pending {
                j.pending = false;
                j.state = "cancelled";
            } else {
                m.make_ready(&id);
            }
        }
        Op::Due { id } => {
            let id = format!("j{id}");
            let _: i64 = redis::cmd("ZADD")
                .arg(format!("jw:{{{q}}}:expiry"))
                .arg("XX")
                .arg(1)
                .arg(&id)
                .query_async(redis)
                .await
                .expect("zadd");
            if let Some(j) = m.jobs.get_mut(&id) {
                if j.expiry {
                    j.due = true;
                }
            }
        }
        Op::Cancel { id } => {
            let id = format!("j{id}");
            let got = store.cancel_job(q, &id, "r").await.expect("cancel");
            let Some(j) = m.jobs.get(&id).cloned() else {
                assert!(
                    matches!(got, CancelOutcome::NotFound),
                    "cancel {id}: {got:?}"
                );
                return;
            };
            let CancelOutcome::Job {
                job,
                cancelled,
                token,
                ..
            } = got
            else {
                panic!("cancel {id}: not found");
            };
            let want = match j.state {
                "waiting" | "delayed" => true,
                "active" => !j.pending,
                _ => false,
            };
            assert_eq!(cancelled, want, "cancel {id} ({})", j.state);
            match j.state {
                "waiting" | "delayed" => {
                    m.unwait(&id);
                    let j = m.jobs.get_mut(&id).expect("job");
                    j.state = "cancelled";
                    j.expiry = false;
                }
                "active" => {
                    assert_eq!(token, j.token, "cancel {id}: the holder's token");
                    m.jobs.get_mut(&id).expect("job").pending = true;
                }
                _ => {}
            }
            assert_eq!(
                job.state.as_str(),
                m.jobs[&id].state,
                "cancel {id}: the job after"
            );
        }
        Op::DeleteJob { id } => {
            let id = format!("j{id}");
            let got = store.delete_job(q, &id).await.expect("delete job");
            match m.jobs.get(&id).map(|j| j.state) {
                None => assert_eq!(got, DeletedJob::NotFound, "delete {id}"),
                Some("active") => assert_eq!(got, DeletedJob::Active, "delete {id}"),
                Some(state) => {
                    assert!(
                        matches!(&got, DeletedJob::Deleted(s) if s.as_str() == state),
                        "delete {id} ({state}): {got:?}"
                    );
                    m.unwait(&id);
                    m.jobs.remove(&id);
                    m.deleted += 1;
                }
            }
        }
        Op::Replay { id } => {
            let id = format!("j{id}");
            let (done, _) = store
                .replay(q, &DeadSelector::Ids(vec![id.clone()]))
                .await
                .expect("replay");
            let dead = m.jobs.get(&id).is_some_and(|j| j.state == "dead");
            assert_eq!(done.len(), usize::from(dead), "replay {id}");
            if dead {
                m.jobs.get_mut(&id).expect("job").att = 0;
                m.make_ready(&id);
            }
        }
        Op::Delete { id } => {
            let id = format!("j{id}");
            let (done, _) = store
                .delete_dead(q, &DeadSelector::Ids(vec![id.clone()]))
                .await
                .expect("delete");
            let dead = m.jobs.get(&id).is_some_and(|j| j.state == "dead");
            assert_eq!(done.len(), usize::from(dead), "delete {id}");
            if dead {
                m.jobs.remove(&id);
                m.deleted += 1;
            }
        }
    }
}

async fn check(store: &Store, q: &QueueName, c: &mut RawConn, m: &Model) {
    let p = format!("jw:{{{q}}}:");
    let mut members: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for set in SETS {
        let ids: Vec<String> = if set == "waiting" {
            store.waiting_ids(q).await.expect("waiting ids")
        } else {
            redis::cmd("ZRANGE")
                .arg(format!("{p}{set}"))
                .arg(0)
                .arg(-1)
                .query_async(c)
                .await
                .expect("zrange")
        };
        members.insert(set, ids);
    }
    let total: usize = members.values().map(Vec::len).sum();
    assert_eq!(
        total,
        m.jobs.len(),
        "no job lost or in two sets: {members:?}"
    );
    assert_eq!(
        m.jobs.len() as u32,
        m.created - m.deleted,
        "counts conserved"
    );
    for (id, j) in &m.jobs {
        let holders: Vec<&str> = SETS
            .iter()
            .copied()
            .filter(|s| members[s].contains(id))
            .collect();
        assert_eq!(holders, [j.state], "{id} is in exactly its state's set");
        let job = store
            .get_job(q, id)
            .await
            .expect("get_job")
            .expect("stored");
        let (st, att) = (job.state.as_str(), job.attempts_made);
        assert_eq!((st, att), (j.state, j.att), "{id}'s record");
        assert!(att <= j.max, "{id}: {att} attempts of {}", j.max);
    }
    // The default group's jobs in lease order, then the grouped ones in ready order
    // (Store::waiting_ids).
    let mut order: Vec<&str> = m
        .waiting
        .iter()
        .filter(|(_, _, id)| m.group_of(id).is_empty())
        .map(|(_, _, id)| id.as_str())
        .collect();
    let mut grouped: Vec<&(i32, u64, String)> = m
        .waiting
        .iter()
        .filter(|(_, _, id)| !m.group_of(id).is_empty())
        .collect();
    grouped.sort_by_key(|(_, s, _)| *s);
    order.extend(grouped.iter().map(|(_, _, id)| id.as_str()));
    assert_eq!(members["waiting"], order, "waiting order");

    // The groups' records (groups.lua): waiting and leased counts per group, the turns.
    let count = |state: &str, g: &str| {
        m.jobs
            .values()
            .filter(|j| j.state == state && j.group == g)
            .count() as f64
    };
    let gcount: Vec<(String, f64)> = redis::cmd("ZRANGE")
        .arg(format!("{p}gcount"))
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .query_async(c)
        .await
        .expect("gcount");
    let want: Vec<(String, f64)> = ["ga", "gb"]
        .iter()
        .map(|g| (g.to_string(), count("waiting", g)))
        .filter(|(_, n)| *n > 0.0)
        .collect();
    let mut gcount = gcount;
    gcount.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(gcount, want, "waiting jobs per group");
    let active: BTreeMap<String, f64> = redis::cmd("HGETALL")
        .arg(format!("{p}groups"))
        .query_async(c)
        .await
        .expect("groups");
    let mut want: BTreeMap<String, f64> = ["ga", "gb"]
        .iter()
        .map(|g| (g.to_string(), count("active", g)))
        .filter(|(_, n)| *n > 0.0)
        .collect();
    let total: f64 = want.values().sum();
    if total > 0.0 {
        want.insert(String::new(), total);
    }
    assert_eq!(active, want, "leased jobs per group");
    let ready: BTreeMap<String, f64> = redis::cmd("ZRANGE")
        .arg(format!("{p}gready"))
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .query_async::<Vec<(String, f64)>>(c)
        .await
        .expect("gready")
        .into_iter()
        .collect();
    assert_eq!(ready, m.ready, "the groups' turns (passes)");
}

static CASE: AtomicU32 = AtomicU32::new(0);

#[test]
fn the_scripts_agree_with_the_model_after_every_step() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let redis = rt.block_on(TestRedis::start());
    let store = rt.block_on(async {
        Store::connect(&redis.url, Duration::from_secs(5))
            .await
            .expect("store")
    });
    let config = ProptestConfig {
        cases: 64,
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    proptest!(config, |(ops in prop::collection::vec(op(), 1..60))| {
        let q = QueueName::parse(&format!("m{}", CASE.fetch_add(1, Ordering::Relaxed))).expect("queue");
        rt.block_on(async {
            let mut conn = redis.conn().await;
            let mut m = Model::default();
            for op in &ops {
                apply(&store, &q, &mut conn, &mut m, op).await;
                check(&store, &q, &mut conn, &m).await;
            }
        });
    });
}
