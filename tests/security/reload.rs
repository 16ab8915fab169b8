//! Reloading the auth file while serving: a revoked token fails its next call with
//! UNAUTHENTICATED and its open Subscribe stream ends (no more leases); a worker whose role
//! on a queue was taken away has its stream ended with PERMISSION_DENIED; a bad file is
//! refused (counted in jobwire_config_reloads_total{file="auth",result="error"}) and the
//! policy in force stays, until a good file replaces it.

use std::time::Duration;

use jobwire::pb;
use tonic::Code;

use crate::harness::{eventually, http_get, metric_value};
use crate::secured::*;

const PATIENCE: Duration = Duration::from_secs(15);

/// How the stream ended: the status it ended with (None: it ended cleanly).
async fn ending(stream: &mut Stream) -> Option<tonic::Status> {
    loop {
        match stream.next(PATIENCE).await {
            Ok(Some(pb::subscribe_response::Message::Lease(l))) => {
                panic!("a revoked stream got a lease: {l:?}")
            }
            Ok(Some(_)) => continue,
            Ok(None) => return None,
            Err(st) => return Some(st),
        }
    }
}

async fn reloads(s: &Secured, result: &str) -> f64 {
    let text = http_get(s.app.http, "/metrics").await;
    metric_value(
        &text,
        "jobwire_config_reloads_total",
        &[("file", "auth"), ("result", result)],
    )
    .unwrap_or(0.0)
}

#[tokio::test]
async fn a_revoked_token_and_a_revoked_grant_take_effect_on_reload() {
    let gone = Who::new("gone", &[(&["q1"], &["worker", "viewer"])]);
    let moved = Who::new("moved", &[(&["q2"], &["worker"])]);
    let producer = Who::new("producer", &[(&["*"], &["producer"])]);
    let s = Secured::start(&[&gone, &moved, &producer]).await;
    let mut g = s.as_(&gone);
    let mut m = s.as_(&moved);
    let mut gone_stream = g.subscribe(&["q1"], 5).await.expect("gone subscribes");
    let mut moved_stream = m.subscribe(&["q2"], 5).await.expect("moved subscribes");
    g.queues
        .get_queue_stats(pb::GetQueueStatsRequest { queue: "q1".into() })
        .await
        .expect("gone may view q1 before the reload");

    // `gone` loses its token; `moved` keeps its token but its worker role moves to q3.
    let moved_after = Who {
        grants: vec![(vec!["q3".into()], vec!["worker".into()])],
        ..moved.clone()
    };
    let ok_before = reloads(&s, "ok").await;
    s.rewrite(&auth_yaml(&[&moved_after, &producer]));

    let st = ending(&mut gone_stream)
        .await
        .expect("the revoked principal's stream ends with an error");
    assert_eq!(st.code(), Code::Unauthenticated, "{}", st.message());
    let st = ending(&mut moved_stream)
        .await
        .expect("the stream on q2 ends with an error");
    assert_eq!(st.code(), Code::PermissionDenied, "{}", st.message());
    assert!(st.message().contains("\"q2\""), "{}", st.message());
    assert!(reloads(&s, "ok").await > ok_before);

    let st = g
        .queues
        .get_queue_stats(pb::GetQueueStatsRequest { queue: "q1".into() })
        .await
        .expect_err("the revoked token is refused");
    assert_eq!(st.code(), Code::Unauthenticated, "{}", st.message());
    let st = g.subscribe(&["q1"], 1).await.err().expect("no new stream");
    assert_eq!(st.code(), Code::Unauthenticated);
    let st = m
        .subscribe(&["q2"], 1)
        .await
        .err()
        .expect("no stream on q2");
    assert_eq!(st.code(), Code::PermissionDenied);
    m.subscribe(&["q3"], 1).await.expect("moved works q3 now");
    // A job enqueued now on q1 is not leased to anyone.
    s.as_(&producer)
        .jobs
        .enqueue(pb::EnqueueRequest {
            job: Some(job("q1", "after")),
        })
        .await
        .expect("enqueue");

    // A bad file is refused; the policy in force stays.
    let errors_before = reloads(&s, "error").await;
    s.rewrite("principals:\n  - name: broken\n    tokens: [{id: x, sha256: nothex}]\n");
    eventually(PATIENCE, || async {
        reloads(&s, "error").await > errors_before
    })
    .await;
    m.subscribe(&["q3"], 1)
        .await
        .expect("the old policy is still in force");
    let st = g
        .jobs
        .get_job(pb::GetJobRequest {
            queue: "q1".into(),
            job_id: "after".into(),
        })
        .await
        .expect_err("and gone is still revoked");
    assert_eq!(st.code(), Code::Unauthenticated);

    // A good file again: `gone` is back.
    s.rewrite(&auth_yaml(&[&gone, &moved_after, &producer]));
    eventually(PATIENCE, || {
        let mut g = s.as_(&gone);
        async move {
            g.queues
                .get_queue_stats(pb::GetQueueStatsRequest { queue: "q1".into() })
                .await
                .is_ok()
        }
    })
    .await;
}
