//! The model test's reap (`Op::Expire`): a lease expires, then the reaper runs with the
//! unconfirmed lease calls taken as old (lost) or young (their confirmation may be on its
//! way), as `reap.lua` says (issue 32, item 1): every lapsed lease, in K_ACTIVE order (score
//! 1, then id), of a confirmed call fails (or ends CANCELLED when a cancel is pending); of a
//! young unconfirmed call it stays active, pushed later (the test puts it back to lapsed);
//! of an old one it goes back uncharged with the call's other lapsed leases, in slot order,
//! while the call's leases that have not lapsed stay with their workers and keep its record.

use super::*;

/// Makes the lease of active `id` expire: its K_ACTIVE score 1.
pub(super) async fn lapse(redis: &mut RawConn, q: &QueueName, id: &str) {
    let _: i64 = redis::cmd("ZADD")
        .arg(format!("jw:{{{q}}}:active"))
        .arg("XX")
        .arg(1)
        .arg(id)
        .query_async(redis)
        .await
        .expect("zadd");
}

/// Redis's clock, ms.
async fn redis_ms(redis: &mut RawConn, q: &QueueName) -> u64 {
    // TIME has no key: route it by the queue's slot, where the scripts run.
    let (s, us): (u64, u64) = redis::cmd("EVAL")
        .arg("local t = redis.call('TIME') return { tonumber(t[1]), tonumber(t[2]) }")
        .arg(1)
        .arg(format!("jw:{{{q}}}:active"))
        .query_async(redis)
        .await
        .expect("time");
    s * 1000 + us / 1000
}

/// The lease call id of a token (`<call id>-<slot>`).
fn call_of(token: &str) -> &str {
    token.rsplit_once('-').map_or(token, |(c, _)| c)
}

pub(super) async fn expire(
    store: &Store,
    q: &QueueName,
    redis: &mut RawConn,
    m: &mut Model,
    pick: usize,
    old: bool,
) {
    let Some((id, _)) = m.pick_active(pick, false) else {
        return;
    };
    lapse(redis, q, &id).await;
    m.jobs.get_mut(&id).expect("job").lapsed = true;
    const YOUNG: Duration = Duration::from_secs(3600);
    let lost_after = if old { Duration::ZERO } else { YOUNG };
    let t0 = redis_ms(redis, q).await;
    let report = store
        .clone()
        .with_lost_call_after(lost_after)
        .reap(q, 100)
        .await
        .expect("reap");

    let lapsed: Vec<String> = m
        .jobs
        .iter()
        .filter(|(_, j)| j.state == "active" && j.lapsed)
        .map(|(id, _)| id.clone())
        .collect();
    let (mut reaped, mut expired, mut pushed) = (0, 0u64, Vec::new());
    for id in lapsed {
        let j = &m.jobs[&id];
        // Handed back already with an earlier lease of its call.
        if j.state != "active" || !j.lapsed {
            continue;
        }
        let call = call_of(&j.token).to_owned();
        if let Some(ids) = m.unconfirmed.get(&call).cloned() {
            if !old {
                pushed.push(id);
                continue;
            }
            // Lost: its lapsed leases go back uncharged, in slot order; the others stay.
            let prefix = format!("{call}-");
            let under = |m: &Model, cid: &String| {
                m.jobs
                    .get(cid)
                    .is_some_and(|c| c.state == "active" && c.token.starts_with(&prefix))
            };
            for cid in &ids {
                if under(m, cid) && m.jobs[cid].lapsed {
                    m.hand_back(cid);
                }
            }
            if !ids.iter().any(|cid| under(m, cid)) {
                m.unconfirmed.remove(&call);
            }
            continue;
        }
        reaped += 1;
        if j.pending {
            let j = m.jobs.get_mut(&id).expect("job");
            j.old_tokens.push(std::mem::take(&mut j.token));
            (j.state, j.pending, j.lapsed) = ("cancelled", false, false);
        } else if m.fail_attempt(&id, 0) {
            expired += 1;
        }
    }
    assert_eq!(
        report.reaped.len(),
        reaped,
        "reaped: the lapsed leases of confirmed calls"
    );
    // A young call's lapsed lease is neither released nor failed: pushed to when the call is
    // twice as old (at least 20 ms on), at the latest when it counts as lost.
    for id in pushed {
        let score: Option<f64> = redis::cmd("ZSCORE")
            .arg(format!("jw:{{{q}}}:active"))
            .arg(&id)
            .query_async(redis)
            .await
            .expect("zscore");
        let score = score.unwrap_or_else(|| panic!("{id} of a young call was taken back")) as u64;
        assert!(
            score >= t0 + 20 && score <= t0 + YOUNG.as_millis() as u64 + 1000,
            "{id} of a young call looked at again at {score} (reap at {t0})"
        );
        lapse(redis, q, &id).await;
    }
    // The reap also expires the waiting and delayed jobs whose expiry is due.
    let due: Vec<String> = m
        .jobs
        .iter()
        .filter(|(_, j)| j.expiry && j.due && matches!(j.state, "waiting" | "delayed"))
        .map(|(id, _)| id.clone())
        .collect();
    expired += due.len() as u64;
    for id in due {
        m.unwait(&id);
        let j = m.jobs.get_mut(&id).expect("job");
        j.state = "expired";
        j.expiry = false;
    }
    assert_eq!(report.expired, expired, "expired by the reaper");
}
