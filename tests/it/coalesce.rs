//! Acks and fails from many streams at once go through one settle lane per queue (eight
//! streams, each on both of two queues, here): every message still gets exactly its own
//! Settled (code and state, stale tokens and unknown ids among them), and every job ends
//! where its settle put it. Leasing the jobs also checks that streams on two busy queues
//! are served at once (their loops once waited for each other's safety poll).

use std::collections::HashMap;

use jobwire::pb;
use pb::subscribe_request::Message as In;

use crate::harness::*;

const STREAMS: usize = 8;
const CREDITS: u32 = 25;
const QUEUES: [&str; 2] = ["co-a", "co-b"];

/// What one stream sent for one lease, and what its Settled must say.
struct Expect {
    queue: String,
    job_id: String,
    token: String,
    code: tonic::Code,
    state: pb::JobState,
}

fn ack(queue: &str, job_id: &str, token: &str) -> In {
    In::Ack(pb::AckRequest {
        result: Vec::new(),
        queue: queue.into(),
        job_id: job_id.into(),
        lease_token: token.into(),
    })
}

fn fail_no_retry(queue: &str, job_id: &str, token: &str) -> In {
    In::Fail(pb::FailRequest {
        queue: queue.into(),
        job_id: job_id.into(),
        lease_token: token.into(),
        disposition: pb::FailDisposition::NoRetry as i32,
        error: Some(pb::JobError {
            message: "permanent".into(),
            error_type: "Test".into(),
            details: String::new(),
        }),
        ..Default::default()
    })
}

/// Per lease `k` of a stream: a stale-token ack first (refused, the job stays active),
/// then the real ack, or a NO_RETRY fail for every fifth; plus one ack of a job that does
/// not exist. Returns the messages in sending order with their expected outcomes.
fn plan(stream: usize, leases: &[pb::Lease]) -> Vec<(In, Expect)> {
    let mut out = Vec::new();
    for (k, l) in leases.iter().enumerate() {
        let job = l.job.as_ref().expect("job");
        let (q, id, token) = (&job.queue, &job.job_id, &l.lease_token);
        if k % 3 == 0 {
            let stale = format!("stale-{stream}-{k}");
            out.push((
                ack(q, id, &stale),
                Expect {
                    queue: q.clone(),
                    job_id: id.clone(),
                    token: stale,
                    code: tonic::Code::FailedPrecondition,
                    state: pb::JobState::Unspecified,
                },
            ));
        }
        let (msg, code, state) = if k % 5 == 0 {
            (
                fail_no_retry(q, id, token),
                tonic::Code::Ok,
                pb::JobState::Dead,
            )
        } else {
            (ack(q, id, token), tonic::Code::Ok, pb::JobState::Completed)
        };
        out.push((
            msg,
            Expect {
                queue: q.clone(),
                job_id: id.clone(),
                token: token.clone(),
                code,
                state,
            },
        ));
    }
    let missing = format!("missing-{stream}");
    out.push((
        ack(QUEUES[stream % 2], &missing, "t"),
        Expect {
            queue: QUEUES[stream % 2].into(),
            job_id: missing,
            token: "t".into(),
            code: tonic::Code::NotFound,
            state: pb::JobState::Unspecified,
        },
    ));
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_streams_settling_at_once_each_get_their_own_results() {
    let (_redis, app) = TestApp::with_redis().await;
    let total = STREAMS * CREDITS as usize;
    let specs = (0..total)
        .map(|i| spec(QUEUES[i % 2], &format!("job-{i}")))
        .collect();
    let r = app
        .jobs()
        .enqueue_batch(pb::EnqueueBatchRequest { jobs: specs })
        .await
        .expect("enqueue batch")
        .into_inner();
    assert!(r.results.iter().all(|x| x.created));

    let mut workers = Vec::new();
    for s in 0..STREAMS {
        let mut w = TestWorker::open(&app, &QUEUES, CREDITS, &format!("w{s}")).await;
        let mut leases = Vec::new();
        for _ in 0..CREDITS {
            leases.push(w.lease().await);
        }
        workers.push((w, leases));
    }

    // Every stream sends its whole plan at once, all streams side by side.
    let tasks: Vec<_> = workers
        .into_iter()
        .enumerate()
        .map(|(s, (mut w, leases))| {
            tokio::spawn(async move {
                let plan = plan(s, &leases);
                let mut expected = HashMap::new();
                for (msg, e) in plan {
                    w.send(msg);
                    expected.insert((e.job_id.clone(), e.token.clone()), e);
                }
                let mut seen = 0;
                while seen < expected.len() {
                    let got = w.settled().await;
                    let e = expected
                        .get(&(got.job_id.clone(), got.lease_token.clone()))
                        .unwrap_or_else(|| panic!("stream {s}: a Settled not for it: {got:?}"));
                    assert_eq!(got.queue, e.queue);
                    assert_eq!(
                        got.code, e.code as i32,
                        "stream {s} {}: {}",
                        e.job_id, got.message
                    );
                    assert_eq!(got.state, e.state as i32, "stream {s} {}", e.job_id);
                    seen += 1;
                }
                leases
            })
        })
        .collect();
    let mut finished = Vec::new();
    for t in tasks {
        finished.push(t.await.expect("stream task"));
    }

    for leases in finished {
        for (k, l) in leases.iter().enumerate() {
            let job = l.job.as_ref().expect("job");
            let want = if k % 5 == 0 {
                pb::JobState::Dead
            } else {
                pb::JobState::Completed
            };
            let stored = get_job(&app, &job.queue, &job.job_id).await;
            assert_eq!(stored.state, want as i32, "{}", job.job_id);
        }
    }
}
