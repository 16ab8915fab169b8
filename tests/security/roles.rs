//! Each RPC of the five jobwire services × each role, over TLS with bearer tokens: a principal holding only that role
//! (on `t-*`) gets an answer (OK, or the call's own NOT_FOUND), every other call is
//! PERMISSION_DENIED naming the queue and the role it needs, and changes nothing in Redis.
//! A principal with no grant on the queue is refused everything there.
//!
//! The expected table is written out from issue 13, not computed from the server's code.

use jobwire::pb;
use tonic::Code;

use crate::refusal::snapshot;
use crate::secured::*;

/// (RPC, the roles that may call it), as issue 13 lists them.
const TABLE: &[(&str, &[&str])] = &[
    ("Enqueue", &["producer"]),
    ("EnqueueBatch", &["producer"]),
    ("GetJob", &["producer", "viewer", "admin"]),
    // Issue 15: listing a queue's jobs is a viewer's read (a producer reads its own jobs by
    // id), as is listing the worker streams.
    ("ListJobs", &["viewer", "admin"]),
    // Issue 16: a producer withdraws its jobs (as an operator may); deleting one is an
    // operator's.
    ("CancelJob", &["producer", "admin"]),
    ("CancelJobs", &["producer", "admin"]),
    ("DeleteJob", &["admin"]),
    ("Subscribe", &["worker"]),
    ("Ack", &["worker"]),
    ("Fail", &["worker"]),
    ("ExtendLease", &["worker"]),
    // Issue 16: a progress report is a worker's, like the Ack it precedes.
    ("ReportProgress", &["worker"]),
    ("ListDeadLetters", &["viewer", "admin"]),
    ("GetDeadLetter", &["viewer", "admin"]),
    ("ReplayDeadLetters", &["admin"]),
    ("DeleteDeadLetters", &["admin"]),
    ("ListQueues", &["viewer", "admin"]),
    ("GetQueueStats", &["viewer", "admin"]),
    ("PauseQueue", &["admin"]),
    ("ResumeQueue", &["admin"]),
    ("GetQueueConfig", &["viewer", "admin"]),
    ("UpdateQueueConfig", &["admin"]),
    ("PurgeQueue", &["admin"]),
    ("DeleteQueue", &["admin"]),
    ("ListWorkers", &["viewer", "admin"]),
    // Issue 16: the groups of a queue, read like its stats, changed like its config.
    ("ListGroups", &["viewer", "admin"]),
    ("GetGroup", &["viewer", "admin"]),
    ("UpdateGroupConfig", &["admin"]),
    ("PauseGroup", &["admin"]),
    ("ResumeGroup", &["admin"]),
];

/// The codes an allowed call may end with: OK, or NOT_FOUND for the calls that name a job
/// (or queue) that is not there.
fn allowed_codes(rpc: &str) -> &'static [Code] {
    match rpc {
        "GetJob" | "Ack" | "Fail" | "ExtendLease" | "ReportProgress" | "GetDeadLetter"
        | "CancelJob" | "DeleteJob" => &[Code::NotFound],
        "DeleteQueue" => &[Code::Ok, Code::NotFound],
        _ => &[Code::Ok],
    }
}

/// Calls `rpc` on queue `q` (ListQueues names none) with a request that is valid.
pub async fn call(c: &mut Clients, rpc: &str, q: &str) -> Result<(), tonic::Status> {
    let s = |v: &str| v.to_string();
    let job = |q: &str| pb::JobSpec {
        queue: s(q),
        name: s("n"),
        ..Default::default()
    };
    match rpc {
        "Enqueue" => c
            .jobs
            .enqueue(pb::EnqueueRequest { job: Some(job(q)) })
            .await
            .map(drop),
        "EnqueueBatch" => c
            .jobs
            .enqueue_batch(pb::EnqueueBatchRequest { jobs: vec![job(q)] })
            .await
            .map(drop),
        "GetJob" => c
            .jobs
            .get_job(pb::GetJobRequest {
                queue: s(q),
                job_id: s("nope"),
            })
            .await
            .map(drop),
        "CancelJob" => c
            .jobs
            .cancel_job(pb::CancelJobRequest {
                queue: s(q),
                job_id: s("nope"),
                reason: s("r"),
            })
            .await
            .map(drop),
        "CancelJobs" => c
            .jobs
            .cancel_jobs(pb::CancelJobsRequest {
                queue: s(q),
                filter: Some(pb::JobFilter {
                    name: s("n"),
                    ..Default::default()
                }),
                ..Default::default()
            })
            .await
            .map(drop),
        "DeleteJob" => c
            .jobs
            .delete_job(pb::DeleteJobRequest {
                queue: s(q),
                job_id: s("nope"),
            })
            .await
            .map(drop),
        "ListJobs" => c
            .jobs
            .list_jobs(pb::ListJobsRequest {
                queue: s(q),
                state: pb::JobState::Waiting as i32,
                ..Default::default()
            })
            .await
            .map(drop),
        "ListWorkers" => c
            .queues
            .list_workers(pb::ListWorkersRequest { queue: s(q) })
            .await
            .map(drop),
        "Subscribe" => c.subscribe(&[q], 1).await.map(drop),
        "Ack" => c
            .workers
            .ack(pb::AckRequest {
                result: Vec::new(),
                queue: s(q),
                job_id: s("nope"),
                lease_token: s("t"),
            })
            .await
            .map(drop),
        "Fail" => c
            .workers
            .fail(pb::FailRequest {
                queue: s(q),
                job_id: s("nope"),
                lease_token: s("t"),
                ..Default::default()
            })
            .await
            .map(drop),
        "ExtendLease" => c
            .workers
            .extend_lease(pb::ExtendLeaseRequest {
                queue: s(q),
                job_id: s("nope"),
                lease_token: s("t"),
                lease_duration: None,
            })
            .await
            .map(drop),
        "ReportProgress" => c
            .workers
            .report_progress(pb::ReportProgressRequest {
                queue: s(q),
                job_id: s("nope"),
                lease_token: s("t"),
                progress: Some(50),
                ..Default::default()
            })
            .await
            .map(drop),
        "ListDeadLetters" => c
            .dead
            .list_dead_letters(pb::ListDeadLettersRequest {
                queue: s(q),
                ..Default::default()
            })
            .await
            .map(drop),
        "GetDeadLetter" => c
            .dead
            .get_dead_letter(pb::GetDeadLetterRequest {
                queue: s(q),
                job_id: s("nope"),
            })
            .await
            .map(drop),
        "ReplayDeadLetters" => c
            .dead
            .replay_dead_letters(pb::ReplayDeadLettersRequest {
                queue: s(q),
                job_ids: vec![s("nope")],
                filter: None,
            })
            .await
            .map(drop),
        "DeleteDeadLetters" => c
            .dead
            .delete_dead_letters(pb::DeleteDeadLettersRequest {
                queue: s(q),
                job_ids: vec![s("nope")],
                filter: None,
            })
            .await
            .map(drop),
        "ListQueues" => c
            .queues
            .list_queues(pb::ListQueuesRequest {})
            .await
            .map(drop),
        "GetQueueStats" => c
            .queues
            .get_queue_stats(pb::GetQueueStatsRequest { queue: s(q) })
            .await
            .map(drop),
        "PauseQueue" => c
            .queues
            .pause_queue(pb::PauseQueueRequest { queue: s(q) })
            .await
            .map(drop),
        "ResumeQueue" => c
            .queues
            .resume_queue(pb::ResumeQueueRequest { queue: s(q) })
            .await
            .map(drop),
        "GetQueueConfig" => c
            .queues
            .get_queue_config(pb::GetQueueConfigRequest { queue: s(q) })
            .await
            .map(drop),
        "UpdateQueueConfig" => c
            .queues
            .update_queue_config(pb::UpdateQueueConfigRequest {
                queue: s(q),
                config: Some(pb::QueueConfig {
                    default_max_attempts: Some(3),
                    ..Default::default()
                }),
                update_mask: None,
            })
            .await
            .map(drop),
        "PurgeQueue" => c
            .queues
            .purge_queue(pb::PurgeQueueRequest {
                queue: s(q),
                include_completed: true,
                include_dead: true,
            })
            .await
            .map(drop),
        "DeleteQueue" => c
            .queues
            .delete_queue(pb::DeleteQueueRequest {
                queue: s(q),
                force: true,
            })
            .await
            .map(drop),
        "ListGroups" => c
            .groups
            .list_groups(pb::ListGroupsRequest {
                queue: s(q),
                ..Default::default()
            })
            .await
            .map(drop),
        "GetGroup" => c
            .groups
            .get_group(pb::GetGroupRequest {
                queue: s(q),
                group_key: s("tenant"),
            })
            .await
            .map(drop),
        "UpdateGroupConfig" => c
            .groups
            .update_group_config(pb::UpdateGroupConfigRequest {
                queue: s(q),
                group_key: s("tenant"),
                config: Some(pb::GroupConfig {
                    weight: Some(2),
                    ..Default::default()
                }),
                update_mask: None,
            })
            .await
            .map(drop),
        "PauseGroup" => c
            .groups
            .pause_group(pb::PauseGroupRequest {
                queue: s(q),
                group_key: s("tenant"),
                duration: None,
            })
            .await
            .map(drop),
        "ResumeGroup" => c
            .groups
            .resume_group(pb::ResumeGroupRequest {
                queue: s(q),
                group_key: s("tenant"),
            })
            .await
            .map(drop),
        other => panic!("no such RPC in the table: {other}"),
    }
}

/// A refused call: PERMISSION_DENIED naming the queue (if any) and the role, Redis unchanged.
/// `anywhere`: `who` holds a role for `rpc` on some other queue; without one the call is
/// refused before its request is read, and the refusal says the role is needed "on at least
/// one queue" instead of naming the queue.
pub async fn denied(
    s: &Secured,
    c: &mut Clients,
    rpc: &str,
    q: &str,
    role: &str,
    who: &str,
    anywhere: bool,
) -> tonic::Status {
    let before = snapshot(&s.redis).await;
    let st = call(c, rpc, q)
        .await
        .expect_err(&format!("{who} may not call {rpc} on {q}"));
    assert_eq!(
        st.code(),
        Code::PermissionDenied,
        "{who} {rpc} {q}: {}",
        st.message()
    );
    if !anywhere {
        assert!(
            st.message()
                .contains(&format!("principal {who:?} may not call {rpc}:"))
                && st.message().contains("on at least one queue"),
            "{who} {rpc}: refused for holding the role nowhere: {}",
            st.message()
        );
    } else if rpc != "ListQueues" {
        assert!(
            st.message().contains(&format!("queue {q:?}")),
            "{who} {rpc}: names the queue: {}",
            st.message()
        );
    }
    assert!(
        st.message().contains(role),
        "{who} {rpc}: names the role {role}: {}",
        st.message()
    );
    assert_eq!(
        snapshot(&s.redis).await,
        before,
        "{who} {rpc}: a refusal changes nothing in Redis"
    );
    st
}

#[tokio::test]
async fn each_rpc_and_each_role() {
    let roles = ["producer", "worker", "viewer", "admin"];
    let who: Vec<Who> = roles
        .iter()
        .map(|r| Who::new(r, &[(&["t-*"], &[r])]))
        .collect();
    // Authenticated, with a grant elsewhere only.
    let stranger = Who::new("stranger", &[(&["other-*"], &["producer"])]);
    let mut all: Vec<&Who> = who.iter().collect();
    all.push(&stranger);
    let s = Secured::start(&all).await;
    // Some state for the refusals to leave alone: a waiting job and a dead one.
    let mut admin_side = s.as_(&who[0]);
    for id in ["a", "b"] {
        admin_side
            .jobs
            .enqueue(pb::EnqueueRequest {
                job: Some(job("t-state", id)),
            })
            .await
            .expect("producer enqueues");
    }

    let mut checked = 0;
    for (rpc, allowed) in TABLE {
        // Each RPC on its own queue, so that what an allowed call does (a stream that
        // leases, a purge) never touches another row's queue.
        let q = format!("t-{}", rpc.to_lowercase());
        for (role, w) in roles.iter().zip(&who) {
            let mut c = s.as_(w);
            if allowed.contains(role) {
                let code = match call(&mut c, rpc, &q).await {
                    Ok(()) => Code::Ok,
                    Err(st) => st.code(),
                };
                assert!(
                    allowed_codes(rpc).contains(&code),
                    "{role} may call {rpc}: got {code:?}"
                );
            } else {
                let needs = if rpc == &"GetJob" {
                    "producer"
                } else {
                    allowed[0]
                };
                // Each role principal holds its one role only: none that allows `rpc`.
                denied(&s, &mut c, rpc, &q, needs, role, false).await;
            }
            checked += 1;
        }
        let mut c = s.as_(&stranger);
        // The stranger is a producer elsewhere: refused for the queue on producer RPCs.
        let anywhere = allowed.contains(&"producer");
        denied(&s, &mut c, rpc, &q, allowed[0], "stranger", anywhere).await;
    }
    assert_eq!(checked, TABLE.len() * roles.len());
}

/// The role is checked before the rest of the request: a producer sending an admin call
/// that is also malformed (no job_ids, no filter) is told PERMISSION_DENIED, not how to fix
/// the request (found by a newcomer's try: INVALID_ARGUMENT came first, and the refusal
/// was not audited).
#[tokio::test]
async fn a_malformed_admin_call_without_the_role_is_refused_for_the_role() {
    let producer = Who::new("producer", &[(&["t-*"], &["producer"])]);
    let admin = Who::new("admin", &[(&["t-*"], &["admin"])]);
    let s = Secured::start(&[&producer, &admin]).await;
    let before = snapshot(&s.redis).await;
    let mut c = s.as_(&producer);
    let replay = c
        .dead
        .replay_dead_letters(pb::ReplayDeadLettersRequest {
            queue: "t-q".into(),
            ..Default::default()
        })
        .await
        .expect_err("refused");
    assert_eq!(replay.code(), Code::PermissionDenied, "{replay:?}");
    let delete = c
        .dead
        .delete_dead_letters(pb::DeleteDeadLettersRequest {
            queue: "t-q".into(),
            ..Default::default()
        })
        .await
        .expect_err("refused");
    assert_eq!(delete.code(), Code::PermissionDenied, "{delete:?}");
    assert_eq!(snapshot(&s.redis).await, before);
    // With the role, the same request is told what is wrong with it.
    let e = s
        .as_(&admin)
        .dead
        .replay_dead_letters(pb::ReplayDeadLettersRequest {
            queue: "t-q".into(),
            ..Default::default()
        })
        .await
        .expect_err("invalid");
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
}
