//! Authentication: no token, a malformed one, an unknown id, a wrong secret: every call of
//! the four services is UNAUTHENTICATED and changes nothing in Redis; health and reflection
//! stay open; the right token works. A token made by the real `jobwire token new` binary,
//! pasted into the auth file as it prints it, authenticates.

use jobwire::auth::token::Token;
use jobwire::pb;
use tonic::Code;

use crate::refusal::snapshot;
use crate::roles::call;
use crate::secured::*;

const RPCS: [&str; 30] = [
    "Enqueue",
    "EnqueueBatch",
    "GetJob",
    "ListJobs",
    "CancelJob",
    "CancelJobs",
    "DeleteJob",
    "Subscribe",
    "Ack",
    "Fail",
    "ExtendLease",
    "ReportProgress",
    "ListDeadLetters",
    "GetDeadLetter",
    "ReplayDeadLetters",
    "DeleteDeadLetters",
    "ListQueues",
    "GetQueueStats",
    "PauseQueue",
    "ResumeQueue",
    "GetQueueConfig",
    "UpdateQueueConfig",
    "PurgeQueue",
    "DeleteQueue",
    "ListWorkers",
    "ListGroups",
    "GetGroup",
    "UpdateGroupConfig",
    "PauseGroup",
    "ResumeGroup",
];

#[tokio::test]
async fn without_a_valid_token_every_call_is_unauthenticated_and_changes_nothing() {
    let admin = Who::new(
        "ops",
        &[(&["*"], &["producer", "worker", "viewer", "admin"])],
    );
    let s = Secured::start(&[&admin]).await;
    // State to leave alone: a waiting job.
    s.as_(&admin)
        .jobs
        .enqueue(pb::EnqueueRequest {
            job: Some(job("q", "kept")),
        })
        .await
        .expect("the right token works");

    let right = admin.token.reveal();
    let wrong_secret = {
        let other = Token::generate(&admin.token.id).expect("token");
        other.reveal()
    };
    let cases: Vec<(&str, Bearer, &str)> = vec![
        ("no token", Bearer::none(), "no credentials"),
        (
            "not a bearer token",
            Bearer::raw("Basic b3BzOnNlY3JldA=="),
            "Bearer",
        ),
        ("malformed token", Bearer::token("jw_ops"), "malformed"),
        (
            "not a jobwire token",
            Bearer::token("ghp_abcdefghijklmnopqrstuvwxyz"),
            "malformed",
        ),
        (
            "unknown token id",
            Bearer::token(&Token::generate("nobody").expect("token").reveal()),
            "unknown token id or wrong secret",
        ),
        (
            "wrong secret",
            Bearer::token(&wrong_secret),
            "unknown token id or wrong secret",
        ),
    ];
    for (what, bearer, says) in cases {
        let mut c = s.with(bearer);
        for rpc in RPCS {
            let before = snapshot(&s.redis).await;
            let st = call(&mut c, rpc, "q")
                .await
                .expect_err(&format!("{what}: {rpc} refused"));
            assert_eq!(
                st.code(),
                Code::Unauthenticated,
                "{what}: {rpc}: {}",
                st.message()
            );
            assert!(
                st.message().contains(says),
                "{what}: {rpc}: {}",
                st.message()
            );
            assert!(
                !st.message().contains(&right[10..]),
                "no secret in the message"
            );
            assert_eq!(
                snapshot(&s.redis).await,
                before,
                "{what}: {rpc}: Redis unchanged"
            );
        }
    }

    // Health and reflection answer without a token.
    let mut health = tonic_health::pb::health_client::HealthClient::new(s.app.channel.clone());
    let r = health
        .check(tonic_health::pb::HealthCheckRequest {
            service: "jobwire.v1.JobService".into(),
        })
        .await
        .expect("health is open")
        .into_inner();
    assert_eq!(r.status, 1);
    use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
    use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
    use tonic_reflection::pb::v1::ServerReflectionRequest;
    let mut refl = ServerReflectionClient::new(s.app.channel.clone());
    let mut stream = refl
        .server_reflection_info(tokio_stream::iter(vec![ServerReflectionRequest {
            host: String::new(),
            message_request: Some(MessageRequest::ListServices(String::new())),
        }]))
        .await
        .expect("reflection is open")
        .into_inner();
    assert!(stream
        .message()
        .await
        .expect("reflection answers")
        .is_some());
}

#[tokio::test]
async fn a_token_from_jobwire_token_new_authenticates() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_jobwire"))
        .args(["token", "new", "--id", "ci-bot", "--name", "ci"])
        .output()
        .expect("run jobwire token new");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("utf-8");
    let token = text.lines().next().expect("the token first").to_owned();
    assert!(token.starts_with("jw_ci-bot_"), "{token}");
    // The printed entry, pasted under `principals:`, with its placeholder grant.
    let entry: Vec<String> = text
        .lines()
        .skip(1)
        .filter(|l| !l.starts_with('#'))
        .map(|l| format!("  {l}"))
        .collect();
    assert!(
        !entry.join("\n").contains(&token[10..]),
        "the file entry holds the hash, not the secret"
    );
    let s = Secured::start(&[]).await;
    s.rewrite(&format!("principals:\n{}\n", entry.join("\n")));
    let mut c = s.with(Bearer::token(&token));
    crate::harness::eventually(std::time::Duration::from_secs(10), || {
        let mut jobs = c.jobs.clone();
        async move {
            jobs.enqueue(pb::EnqueueRequest {
                job: Some(job("example-queue", "x")),
            })
            .await
            .is_ok()
        }
    })
    .await;
    let st = c
        .jobs
        .enqueue(pb::EnqueueRequest {
            job: Some(job("other-queue", "x")),
        })
        .await
        .expect_err("the placeholder grant is on example-queue only");
    assert_eq!(st.code(), Code::PermissionDenied);
    let bad = std::process::Command::new(env!("CARGO_BIN_EXE_jobwire"))
        .args(["token", "new", "--id", "has_underscore"])
        .output()
        .expect("run");
    assert_eq!(bad.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--id"));
}
