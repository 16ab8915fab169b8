//! Bad input gets INVALID_ARGUMENT or RESOURCE_EXHAUSTED naming the field, and changes
//! nothing in Redis.

use jobwire::pb;
use tonic_types::StatusExt;

use crate::harness::*;
use crate::refusal::state_keys;

fn violation_field(s: &tonic::Status) -> String {
    s.get_error_details()
        .bad_request()
        .and_then(|b| b.field_violations.first().map(|v| v.field.clone()))
        .unwrap_or_default()
}

#[tokio::test]
async fn bad_enqueues_name_the_field_and_change_nothing() {
    let (redis, app) = TestApp::with_redis().await;
    let backoff = |jitter: f64| {
        Some(pb::Backoff {
            kind: pb::BackoffKind::Exponential as i32,
            jitter,
            ..Default::default()
        })
    };
    let cases: Vec<(pb::JobSpec, tonic::Code, &str)> = vec![
        (spec("", "a"), tonic::Code::InvalidArgument, "job.queue"),
        (spec("a:b", "a"), tonic::Code::InvalidArgument, "job.queue"),
        (
            spec(&"q".repeat(129), "a"),
            tonic::Code::InvalidArgument,
            "job.queue",
        ),
        (
            spec("q", &"i".repeat(257)),
            tonic::Code::InvalidArgument,
            "job.job_id",
        ),
        (
            pb::JobSpec {
                name: String::new(),
                ..spec("q", "a")
            },
            tonic::Code::InvalidArgument,
            "job.name",
        ),
        (
            pb::JobSpec {
                payload: vec![0; 1024 * 1024 + 1],
                ..spec("q", "a")
            },
            tonic::Code::ResourceExhausted,
            "job.payload",
        ),
        (
            pb::JobSpec {
                backoff: backoff(2.0),
                ..spec("q", "a")
            },
            tonic::Code::InvalidArgument,
            "job.backoff.jitter",
        ),
        (
            pb::JobSpec {
                backoff: backoff(-0.1),
                ..spec("q", "a")
            },
            tonic::Code::InvalidArgument,
            "job.backoff.jitter",
        ),
        (
            pb::JobSpec {
                backoff: backoff(f64::NAN),
                ..spec("q", "a")
            },
            tonic::Code::InvalidArgument,
            "job.backoff.jitter",
        ),
        (
            pb::JobSpec {
                backoff: Some(pb::Backoff::default()),
                ..spec("q", "a")
            },
            tonic::Code::InvalidArgument,
            "job.backoff.kind",
        ),
        (
            pb::JobSpec {
                max_attempts: Some(0),
                ..spec("q", "a")
            },
            tonic::Code::InvalidArgument,
            "job.max_attempts",
        ),
        (
            pb::JobSpec {
                max_attempts: Some(1001),
                ..spec("q", "a")
            },
            tonic::Code::InvalidArgument,
            "job.max_attempts",
        ),
        (
            pb::JobSpec {
                priority: 1001,
                ..spec("q", "a")
            },
            tonic::Code::InvalidArgument,
            "job.priority",
        ),
        (
            pb::JobSpec {
                delay: Some(prost_types::Duration {
                    seconds: -1,
                    nanos: 0,
                }),
                ..spec("q", "a")
            },
            tonic::Code::InvalidArgument,
            "job.delay",
        ),
        (
            pb::JobSpec {
                delay: Some(prost_types::Duration {
                    seconds: i64::MAX,
                    nanos: 0,
                }),
                ..spec("q", "a")
            },
            tonic::Code::InvalidArgument,
            "job.delay",
        ),
        (
            pb::JobSpec {
                timeout: Some(prost_types::Duration {
                    seconds: 0,
                    nanos: 0,
                }),
                ..spec("q", "a")
            },
            tonic::Code::InvalidArgument,
            "job.timeout",
        ),
    ];
    for (spec, code, field) in cases {
        let s = app
            .jobs()
            .enqueue(pb::EnqueueRequest { job: Some(spec) })
            .await
            .expect_err(field);
        assert_eq!(s.code(), code, "{field}: {}", s.message());
        assert_eq!(violation_field(&s), field, "{}", s.message());
        assert!(
            s.message().contains(field),
            "the message names the field: {}",
            s.message()
        );
    }
    let s = app
        .jobs()
        .enqueue(pb::EnqueueRequest { job: None })
        .await
        .expect_err("no job");
    assert_eq!(s.code(), tonic::Code::InvalidArgument);
    assert_eq!(
        state_keys(&redis).await,
        Vec::<String>::new(),
        "nothing was written"
    );
}

#[tokio::test]
async fn unicode_and_punctuation_ids_are_legal() {
    let (_redis, app) = TestApp::with_redis().await;
    for id in [
        "ünïcødé-✉",
        "a:b:c",
        "{q}",
        "x}{y",
        "42",
        "with space",
        "nul\0byte",
    ] {
        let r = enqueue(&app, spec("ids", id)).await;
        assert!(r.created, "{id:?}");
        assert_eq!(get_job(&app, "ids", id).await.job_id, id);
    }
}

#[tokio::test]
async fn bad_worker_calls_are_refused() {
    let (_redis, app) = TestApp::with_redis().await;
    let s = app
        .workers()
        .ack(pb::AckRequest {
            result: Vec::new(),
            queue: "q".into(),
            job_id: "nope".into(),
            lease_token: "t".into(),
        })
        .await
        .expect_err("unknown job");
    assert_eq!(s.code(), tonic::Code::NotFound);
    let s = app
        .workers()
        .ack(pb::AckRequest {
            result: Vec::new(),
            queue: "q".into(),
            job_id: "x".into(),
            lease_token: String::new(),
        })
        .await
        .expect_err("empty token");
    assert_eq!(violation_field(&s), "lease_token");
    let s = app
        .workers()
        .fail(pb::FailRequest {
            queue: "q".into(),
            job_id: "x".into(),
            lease_token: "t".into(),
            disposition: 99,
            ..Default::default()
        })
        .await
        .expect_err("unknown disposition");
    assert_eq!(violation_field(&s), "disposition");
    let s = app
        .workers()
        .extend_lease(pb::ExtendLeaseRequest {
            queue: "q".into(),
            job_id: "x".into(),
            lease_token: "t".into(),
            lease_duration: Some(ms(std::time::Duration::from_secs(7200))),
        })
        .await
        .expect_err("too long");
    assert_eq!(violation_field(&s), "lease_duration");
    let s = app
        .dead()
        .list_dead_letters(pb::ListDeadLettersRequest {
            queue: "q".into(),
            page_size: 5000,
            ..Default::default()
        })
        .await
        .expect_err("page too big");
    assert_eq!(violation_field(&s), "page_size");
    let s = app
        .dead()
        .list_dead_letters(pb::ListDeadLettersRequest {
            queue: "q".into(),
            page_token: "garbage".into(),
            ..Default::default()
        })
        .await
        .expect_err("bad token");
    assert_eq!(violation_field(&s), "page_token");
    let s = app
        .dead()
        .replay_dead_letters(pb::ReplayDeadLettersRequest {
            queue: "q".into(),
            ..Default::default()
        })
        .await
        .expect_err("no selector");
    assert_eq!(s.code(), tonic::Code::InvalidArgument);
}

#[tokio::test]
async fn a_stream_must_open_first_with_sane_credits() {
    let (_redis, app) = TestApp::with_redis().await;
    use tokio_stream::iter;
    let hb = pb::SubscribeRequest {
        message: Some(pb::subscribe_request::Message::Heartbeat(pb::Heartbeat {})),
    };
    let s = app
        .workers()
        .subscribe(iter(vec![hb]))
        .await
        .expect_err("not opened");
    assert_eq!(violation_field(&s), "open");
    for (credits, queues) in [
        (0, vec!["q".to_string()]),
        (10_001, vec!["q".into()]),
        (1, vec![]),
        (1, vec!["bad queue".into()]),
    ] {
        let open = pb::SubscribeRequest {
            message: Some(pb::subscribe_request::Message::Open(pb::OpenStream {
                queues,
                credits,
                worker_id: "w".into(),
            })),
        };
        let s = app
            .workers()
            .subscribe(iter(vec![open]))
            .await
            .expect_err("bad open");
        assert_eq!(s.code(), tonic::Code::InvalidArgument, "{}", s.message());
        assert!(
            violation_field(&s).starts_with("open."),
            "{}",
            violation_field(&s)
        );
    }
}

#[tokio::test]
async fn a_second_open_or_zero_credit_grant_ends_the_stream_with_invalid_argument() {
    let (_redis, app) = TestApp::with_redis().await;
    use pb::subscribe_request::Message as In;
    let open = || pb::SubscribeRequest {
        message: Some(In::Open(pb::OpenStream {
            queues: vec!["q".into()],
            credits: 1,
            worker_id: "w".into(),
        })),
    };
    let zero = pb::SubscribeRequest {
        message: Some(In::GrantCredits(pb::GrantCredits { credits: 0 })),
    };
    for (second, field) in [(open(), "open"), (zero, "grant_credits.credits")] {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        tx.send(open()).expect("send");
        let mut stream = app
            .workers()
            .subscribe(tokio_stream::wrappers::UnboundedReceiverStream::new(rx))
            .await
            .expect("opened")
            .into_inner();
        tx.send(second).expect("send");
        let status = loop {
            match stream.message().await {
                Ok(Some(_)) => continue,
                Ok(None) => panic!("stream ended without an error"),
                Err(s) => break s,
            }
        };
        assert_eq!(status.code(), tonic::Code::InvalidArgument);
        assert_eq!(violation_field(&status), field);
    }
}
