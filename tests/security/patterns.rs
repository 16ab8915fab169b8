//! Grants per queue pattern: exact names, `prefix*` and `*`; the right token on the wrong
//! queue; a batch or a stream that names one queue outside the grants is refused whole; an
//! Ack with a lease stolen from another team's worker is refused (unary and on the stream)
//! and changes nothing; ListQueues and ListWorkers show only the queues the principal may
//! view.

use std::time::Duration;

use jobwire::pb;
use pb::subscribe_request::Message as In;
use pb::subscribe_response::Message as Out;
use tonic::Code;

use crate::refusal::snapshot;
use crate::secured::*;

/// Waits until the server confirmed the lease calls of `queue` (a background write), so
/// that a snapshot taken now stays put.
pub async fn lease_calls_confirmed(s: &Secured, queue: &str) {
    let mut c = s.redis.conn().await;
    let keys = [
        format!("jw:{{{queue}}}:calls"),
        format!("jw:{{{queue}}}:call_jobs"),
    ];
    crate::harness::eventually(Duration::from_secs(10), || {
        let mut c = c.clone();
        let keys = keys.clone();
        async move {
            redis::cmd("EXISTS")
                .arg(&keys[..])
                .query_async::<i64>(&mut c)
                .await
                .expect("exists")
                == 0
        }
    })
    .await;
    let _ = &mut c;
}

fn denied(st: &tonic::Status, queue: &str, role: &str) {
    assert_eq!(st.code(), Code::PermissionDenied, "{}", st.message());
    assert!(
        st.message().contains(&format!("queue {queue:?}")) && st.message().contains(role),
        "names {queue} and {role}: {}",
        st.message()
    );
}

/// Refused before the request was read: `who` holds `role` on no queue at all.
fn denied_everywhere(st: &tonic::Status, who: &str, role: &str) {
    assert_eq!(st.code(), Code::PermissionDenied, "{}", st.message());
    assert!(
        st.message().contains(&format!("principal {who:?}"))
            && st
                .message()
                .contains(&format!("{role} on at least one queue")),
        "names {who} and {role}: {}",
        st.message()
    );
}

#[tokio::test]
async fn prefix_exact_and_star_patterns() {
    let billing = Who::new(
        "billing",
        &[
            (&["billing-*"], &["producer", "worker", "viewer"]),
            (&["emails"], &["viewer"]),
        ],
    );
    let anyone = Who::new("any-producer", &[(&["*"], &["producer"])]);
    let s = Secured::start(&[&billing, &anyone]).await;
    let (mut b, mut a) = (s.as_(&billing), s.as_(&anyone));
    let enqueue = |q: &str, id: &str| pb::EnqueueRequest {
        job: Some(job(q, id)),
    };

    b.jobs
        .enqueue(enqueue("billing-eu", "1"))
        .await
        .expect("billing-* matches billing-eu");
    for q in ["billing", "emails", "bill"] {
        let st = b.jobs.enqueue(enqueue(q, "1")).await.expect_err(q);
        denied(&st, q, "producer");
    }
    for q in ["emails", "billing-us", "x"] {
        a.jobs
            .enqueue(enqueue(q, "1"))
            .await
            .expect("* matches every queue");
    }
    let st = a
        .queues
        .get_queue_stats(pb::GetQueueStatsRequest { queue: "x".into() })
        .await
        .expect_err("producer only");
    denied_everywhere(&st, "any-producer", "viewer or admin");

    // A batch with one queue outside the grants is refused whole: nothing written.
    let before = snapshot(&s.redis).await;
    let st = b
        .jobs
        .enqueue_batch(pb::EnqueueBatchRequest {
            jobs: vec![job("billing-eu", "2"), job("emails", "2")],
        })
        .await
        .expect_err("emails is not billing's to produce");
    denied(&st, "emails", "producer");
    assert_eq!(snapshot(&s.redis).await, before, "nothing written");

    // ListQueues: only the queues billing may view (billing-*, emails), not x.
    let mut names: Vec<String> = b
        .queues
        .list_queues(pb::ListQueuesRequest {})
        .await
        .expect("billing views some queues")
        .into_inner()
        .queues
        .into_iter()
        .map(|q| q.queue)
        .collect();
    names.sort();
    assert_eq!(names, ["billing-eu", "billing-us", "emails"]);
    let st = a
        .queues
        .list_queues(pb::ListQueuesRequest {})
        .await
        .expect_err("a producer views no queue");
    assert_eq!(st.code(), Code::PermissionDenied);
    assert!(st.message().contains("viewer or admin"), "{}", st.message());
}

#[tokio::test]
async fn a_worker_may_not_lease_or_settle_another_teams_jobs() {
    let billing = Who::new("billing-worker", &[(&["billing-*"], &["worker"])]);
    let mail = Who::new("mail-worker", &[(&["emails"], &["worker"])]);
    let producer = Who::new("producer", &[(&["*"], &["producer"])]);
    let s = Secured::start(&[&billing, &mail, &producer]).await;
    let mut p = s.as_(&producer);
    for (q, id) in [("emails", "m1"), ("billing-eu", "b1")] {
        p.jobs
            .enqueue(pb::EnqueueRequest {
                job: Some(job(q, id)),
            })
            .await
            .expect("enqueue");
    }
    let mut b = s.as_(&billing);
    // A stream naming one queue outside the grants is refused whole.
    let st = b
        .subscribe(&["billing-eu", "emails"], 5)
        .await
        .err()
        .expect("emails is not billing's to work");
    denied(&st, "emails", "worker");

    // The mail worker holds m1's lease; the billing worker learns its token somehow.
    let mut m = s.as_(&mail);
    let mut mail_stream = m.subscribe(&["emails"], 1).await.expect("mail subscribes");
    let lease = mail_stream.lease().await;
    lease_calls_confirmed(&s, "emails").await;
    let stolen = pb::AckRequest {
        result: Vec::new(),
        queue: "emails".into(),
        job_id: "m1".into(),
        lease_token: lease.lease_token.clone(),
    };

    let before = snapshot(&s.redis).await;
    let st = b.workers.ack(stolen.clone()).await.expect_err("unary ack");
    denied(&st, "emails", "worker");
    let st = b
        .workers
        .fail(pb::FailRequest {
            queue: "emails".into(),
            job_id: "m1".into(),
            lease_token: lease.lease_token.clone(),
            ..Default::default()
        })
        .await
        .expect_err("unary fail");
    denied(&st, "emails", "worker");
    let st = b
        .workers
        .extend_lease(pb::ExtendLeaseRequest {
            queue: "emails".into(),
            job_id: "m1".into(),
            lease_token: lease.lease_token.clone(),
            lease_duration: None,
        })
        .await
        .expect_err("unary extend");
    denied(&st, "emails", "worker");
    assert_eq!(
        snapshot(&s.redis).await,
        before,
        "the unary refusals changed nothing"
    );

    // On billing's own stream: the stolen ack is answered with a Settled refusal, and the
    // stream goes on (its own job is leased and acked).
    let mut own = b
        .subscribe(&["billing-eu"], 1)
        .await
        .expect("billing subscribes");
    let mine = own.lease().await;
    lease_calls_confirmed(&s, "billing-eu").await;
    let before_own = snapshot(&s.redis).await;
    own.send(In::Ack(stolen));
    match own.next(Duration::from_secs(10)).await {
        Ok(Some(Out::Settled(settled))) => {
            assert_eq!(
                settled.code,
                Code::PermissionDenied as i32,
                "{}",
                settled.message
            );
            assert!(
                settled.message.contains("\"emails\""),
                "{}",
                settled.message
            );
            assert_eq!(settled.job_id, "m1");
        }
        other => panic!("expected a Settled refusal, got {other:?}"),
    }
    assert_eq!(
        snapshot(&s.redis).await,
        before_own,
        "the stolen ack changed nothing"
    );
    own.send(In::Ack(pb::AckRequest {
        result: Vec::new(),
        queue: "billing-eu".into(),
        job_id: "b1".into(),
        lease_token: mine.lease_token,
    }));
    match own.next(Duration::from_secs(10)).await {
        Ok(Some(Out::Settled(settled))) => assert_eq!(settled.code, 0, "{}", settled.message),
        other => panic!("expected the own ack settled, got {other:?}"),
    }
    // The owner still holds m1 and acks it.
    mail_stream.send(In::Ack(pb::AckRequest {
        result: Vec::new(),
        queue: "emails".into(),
        job_id: "m1".into(),
        lease_token: lease.lease_token,
    }));
    match mail_stream.next(Duration::from_secs(10)).await {
        Ok(Some(Out::Settled(settled))) => assert_eq!(settled.code, 0, "{}", settled.message),
        other => panic!("expected the owner's ack settled, got {other:?}"),
    }
}

/// ListWorkers without a queue shows only the queues the caller may view: a stream on a
/// viewable and a hidden queue shows the viewable one (and its leases only), a stream on
/// hidden queues only is left out; a queue filter outside the grants is refused, and so is
/// a caller who may view no queue.
#[tokio::test]
async fn list_workers_shows_only_the_queues_the_caller_may_view() {
    let ops = Who::new("ops", &[(&["*"], &["producer", "worker"])]);
    let billing = Who::new("billing-viewer", &[(&["billing-*"], &["viewer"])]);
    let s = Secured::start(&[&ops, &billing]).await;
    let mut o = s.as_(&ops);
    for (q, id) in [("billing-eu", "b1"), ("secret", "s1")] {
        o.jobs
            .enqueue(pb::EnqueueRequest {
                job: Some(job(q, id)),
            })
            .await
            .expect("enqueue");
    }
    let mut mixed = o
        .subscribe(&["billing-eu", "secret"], 2)
        .await
        .expect("subscribe");
    mixed.lease().await;
    mixed.lease().await;
    let _hidden = o.subscribe(&["secret"], 1).await.expect("subscribe");

    let mut b = s.as_(&billing);
    let r = b
        .queues
        .list_workers(pb::ListWorkersRequest::default())
        .await
        .expect("billing views some queues")
        .into_inner();
    assert_eq!(r.streams.len(), 1, "{r:?}");
    let w = &r.streams[0];
    assert_eq!(w.queues, ["billing-eu"]);
    assert_eq!(w.held_leases, 1);
    let leased: Vec<&str> = w.leases.iter().map(|l| l.job_id.as_str()).collect();
    assert_eq!(leased, ["b1"]);
    let r = b
        .queues
        .list_workers(pb::ListWorkersRequest {
            queue: "billing-eu".into(),
        })
        .await
        .expect("a viewable queue")
        .into_inner();
    assert_eq!(r.streams.len(), 1);
    let st = b
        .queues
        .list_workers(pb::ListWorkersRequest {
            queue: "secret".into(),
        })
        .await
        .expect_err("not billing's to view");
    denied(&st, "secret", "viewer or admin");
    let st = o
        .queues
        .list_workers(pb::ListWorkersRequest::default())
        .await
        .expect_err("ops views no queue");
    assert_eq!(st.code(), Code::PermissionDenied);
    assert!(st.message().contains("viewer or admin"), "{}", st.message());
}
