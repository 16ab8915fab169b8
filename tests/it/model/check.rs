//! The model test's check after every step: Redis's state sets, records, counts, group
//! index and passes against the model.

use super::*;

pub(super) async fn check(store: &Store, q: &QueueName, c: &mut RawConn, m: &Model) {
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
        // The expire time on the header: none, past (1 ms, Op::Due) or an hour ahead.
        let expire = match (j.ttl, j.due) {
            (false, _) => job.expire_ms == 0,
            (true, true) => job.expire_ms == 1,
            (true, false) => job.expire_ms > 1,
        };
        assert!(expire, "{id}'s expire time {} (model {j:?})", job.expire_ms);
        if j.state == "active" {
            let score: f64 = redis::cmd("ZSCORE")
                .arg(format!("{p}active"))
                .arg(id)
                .query_async(c)
                .await
                .expect("zscore");
            assert_eq!(
                score == 1.0,
                j.lapsed,
                "{id}'s lease lapsed (score {score})"
            );
        }
    }
    // The expiry index: the waiting and delayed jobs with an expire time.
    let indexed: Vec<String> = redis::cmd("ZRANGE")
        .arg(format!("{p}expiry"))
        .arg(0)
        .arg(-1)
        .query_async(c)
        .await
        .expect("zrange");
    let mut indexed = indexed;
    indexed.sort();
    let want: Vec<&String> = m
        .jobs
        .iter()
        .filter(|(_, j)| j.expiry)
        .map(|(id, _)| id)
        .collect();
    assert_eq!(indexed.iter().collect::<Vec<_>>(), want, "the expiry index");
    // The records of the lease calls not confirmed yet (issue 32).
    let want: Vec<&String> = m.unconfirmed.keys().collect();
    for key in ["calls", "call_jobs"] {
        let mut cmd = redis::cmd(if key == "calls" { "ZRANGE" } else { "HKEYS" });
        cmd.arg(format!("{p}{key}"));
        if key == "calls" {
            cmd.arg(0).arg(-1);
        }
        let mut calls: Vec<String> = cmd.query_async(c).await.expect("calls");
        calls.sort();
        assert_eq!(
            calls.iter().collect::<Vec<_>>(),
            want,
            "unconfirmed lease calls ({key})"
        );
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
