//! The model test's step: one operation applied to Redis (through the store) and to the
//! model, with the outcome each must agree on.

use super::*;

fn settled<T>(s: &Settle<T>) -> Option<Result<(), String>> {
    match s {
        Settle::Done(_) => Some(Ok(())),
        Settle::LeaseLost(state) => Some(Err(state.clone())),
        Settle::NotFound => None,
    }
}

pub(super) async fn apply(
    store: &Store,
    q: &QueueName,
    redis: &mut RawConn,
    m: &mut Model,
    op: &Op,
) {
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
                id_ours: false,
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
                    ttl,
                    expiry: ttl,
                    due: false,
                    lapsed: false,
                    pending: false,
                    group,
                };
                m.jobs.insert(id.clone(), j);
                if !delayed {
                    m.make_ready(&id);
                }
            }
        }
        Op::Lease { n, confirm } => {
            let workers = vec!["w"; n];
            let call = jobwire::store::new_lease_call_id();
            let batch = store
                .lease(q, &workers, 60_000, &call, &[])
                .await
                .expect("lease");
            if confirm {
                // The reply arrived: the leases count as delivered (expiry charges them).
                store
                    .confirm_lease_calls(q, std::slice::from_ref(&call))
                    .await
                    .expect("confirm");
            } else if !batch.jobs.is_empty() {
                // Its reply is on its way: the call stays unconfirmed (issue 32).
                let ids = batch.jobs.iter().map(|l| l.job.id.clone()).collect();
                m.unconfirmed.insert(call, ids);
            }
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
        Op::Confirm => {
            let calls: Vec<String> = std::mem::take(&mut m.unconfirmed).into_keys().collect();
            store.confirm_lease_calls(q, &calls).await.expect("confirm");
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
                j.lapsed = false;
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
            if let Settle::Done(o) = &r[0] {
                if !repeat {
                    assert_eq!(
                        o.state.as_str(),
                        m.jobs[&id].state,
                        "fail {id}: where it went"
                    );
                }
            }
        }
        Op::Expire { pick, old } => super::reap::expire(store, q, redis, m, pick, old).await,
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
            m.hand_back(&id);
        }
        Op::DueHeld { pick } => {
            let held: Vec<u8> = m
                .jobs
                .iter()
                .filter(|(_, j)| j.state == "active" && j.ttl)
                .filter_map(|(id, _)| id[1..].parse().ok())
                .collect();
            if let Some(&id) = held.get(pick % held.len().max(1)) {
                Box::pin(apply(store, q, redis, m, &Op::Due { id })).await;
            }
        }
        Op::Due { id } => {
            let id = format!("j{id}");
            // The header's expire time (the 19th value, common.lua) and its index entry.
            let _: i64 = redis::cmd("EVAL")
                .arg(
                    "local hdr = redis.call('HGET', KEYS[1], ARGV[1]) \
                     if not hdr then return 0 end \
                     local v = { cmsgpack.unpack(hdr) } \
                     if (v[19] or 0) == 0 then return 0 end \
                     v[19] = 1 \
                     redis.call('HSET', KEYS[1], ARGV[1], cmsgpack.pack(unpack(v))) \
                     redis.call('ZADD', KEYS[2], 'XX', 1, ARGV[1]) \
                     return 1",
                )
                .arg(2)
                .arg(format!("jw:{{{q}}}:jobs"))
                .arg(format!("jw:{{{q}}}:expiry"))
                .arg(&id)
                .query_async(redis)
                .await
                .expect("eval");
            if let Some(j) = m.jobs.get_mut(&id) {
                if j.ttl {
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
                "active" if !j.pending => {
                    assert_eq!(token, j.token, "cancel {id}: the holder's token");
                    m.jobs.get_mut(&id).expect("job").pending = true;
                    if m.grace0 {
                        // Revoked at once: the lease expires now (score 1, as Op::Expire).
                        super::reap::lapse(redis, q, &id).await;
                        m.jobs.get_mut(&id).expect("job").lapsed = true;
                    }
                }
                "active" => {
                    assert_eq!(token, j.token, "cancel {id}: the holder's token");
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
                let j = m.jobs.get_mut(&id).expect("job");
                j.att = 0;
                // A replay clears the expire time: a person replaying gets a run.
                (j.ttl, j.due, j.expiry) = (false, false, false);
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
