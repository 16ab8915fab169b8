//! What a new user's slips get: an unknown queue exits 3 and creates nothing (unless
//! `--create`), global flags work before the command group too, and the errors of a wrong
//! `--server` say what is likely wrong.

use crate::harness::*;

/// The stderr of a typo'd queue (the known `emails` is close).
const EMIALS: &str = "jobwire: queue \"emials\" not found (did you mean \"emails\"?)\n";

/// Names ListQueues lists.
async fn queue_names(s: &Server) -> Vec<String> {
    let c = s.client().await;
    c.list_queues()
        .await
        .expect("list")
        .into_iter()
        .map(|q| q.queue)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_queue_exits_3_and_creates_nothing_unless_create() {
    let s = Server::start(&[]).await;
    let c = s.client().await;
    enqueue_n(&c, "emails", "send", "e", 1).await;
    let commands: [&[&str]; 14] = [
        &["queues", "stats", "emials"],
        &["queues", "pause", "emials"],
        &["queues", "resume", "emials"],
        &["queues", "purge", "emials", "--yes"],
        &["queues", "config", "get", "emials"],
        &["queues", "config", "set", "emials", "--max-active", "3"],
        &["dlq", "list", "emials"],
        &["dlq", "show", "emials", "e-0"],
        &["dlq", "replay", "emials", "--yes"],
        &["dlq", "delete", "emials", "e-0", "--yes"],
        &["dlq", "replay", "emials", "--dry-run"],
        &["jobs", "list", "emials"],
        &["jobs", "get", "emials", "e-0"],
        &["workers", "list", "--queue", "emials"],
    ];
    for args in commands {
        let out = s.jw(args);
        out.code(3);
        assert_eq!(out.stderr, EMIALS, "{args:?}");
        assert_eq!(out.stdout, "", "{args:?}");
    }
    // JSON output changes nothing about the error; a name close to nothing gets no guess.
    let out = s.jw(&["queues", "stats", "nosuchq", "-o", "json"]);
    out.code(3);
    assert_eq!(out.stderr, "jobwire: queue \"nosuchq\" not found\n");
    assert_eq!(
        queue_names(&s).await,
        ["emails"],
        "no command created a queue"
    );

    // --create: pre-configure or pause a queue before its first job.
    s.jw(&["queues", "pause", "later", "--create"]).code(0);
    assert!(stats(&c, "later").await.paused);
    s.jw(&[
        "queues",
        "config",
        "set",
        "soon",
        "--create",
        "--max-active",
        "3",
    ])
    .code(0);
    assert_eq!(
        c.get_queue_config("soon").await.expect("config").max_active,
        Some(3)
    );
    // jobs enqueue creates the queue as before.
    s.jw(&["jobs", "enqueue", "fresh", "hello", "{}"]).code(0);
    assert_eq!(queue_names(&s).await, ["emails", "fresh", "later", "soon"]);
    // A known queue works, and a deleted one is unknown again.
    s.jw(&["queues", "stats", "later"]).code(0);
    s.jw(&["queues", "delete", "later", "--yes"]).code(0);
    s.jw(&["queues", "stats", "later"]).code(3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn global_flags_work_before_and_after_the_command_group() {
    let s = Server::start(&[]).await;
    let c = s.client().await;
    enqueue_n(&c, "emails", "send", "e", 2).await;
    let target = s.target();
    let before = run(
        &[
            "--server".into(),
            target.clone(),
            "-o".into(),
            "json".into(),
            "queues".into(),
            "stats".into(),
            "emails".into(),
        ],
        &[],
        None,
    )
    .ok_json();
    assert_eq!(before["waiting"], 2);
    let eq = run(
        &[
            format!("--server={target}"),
            "--output=json".into(),
            "jobs".into(),
            "list".into(),
            "emails".into(),
        ],
        &[],
        None,
    )
    .ok_json();
    assert_eq!(eq["jobs"].as_array().expect("jobs").len(), 2);
    let after = run(
        &[
            "dlq".into(),
            "list".into(),
            "emails".into(),
            "--server".into(),
            target.clone(),
            "-ojson".into(),
        ],
        &[],
        None,
    )
    .ok_json();
    assert_eq!(after["dead_letters"], serde_json::json!([]));
    // The environment still works, and a flag before the group wins over it.
    let env = run(
        &["workers".into(), "list".into(), "-o".into(), "json".into()],
        &[("JOBWIRE_SERVER", &target)],
        None,
    )
    .ok_json();
    assert!(env["streams"].is_array(), "{env}");
    let flag = run(
        &[
            "--server".into(),
            target.clone(),
            "queues".into(),
            "list".into(),
        ],
        &[("JOBWIRE_SERVER", "http://127.0.0.1:1")],
        None,
    );
    flag.code(0);
    assert!(flag.stdout.contains("emails"), "{flag:?}");
}

/// The HTTP address from the server's "jobwire serving" log line.
fn http_addr(s: &Server) -> String {
    let log = s.inner.log_tail(200);
    let mut plain = String::new();
    let mut chars = log.chars();
    while let Some(ch) = chars.next() {
        if ch == '\u{1b}' {
            // An ANSI colour: skip to its final letter.
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            plain.push(ch);
        }
    }
    let at = plain
        .find("http=")
        .expect("the serving line names the HTTP address")
        + 5;
    plain[at..]
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.' || *c == ':')
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_server_says_what_is_likely_wrong() {
    let s = Server::start(&[]).await;
    let http = http_addr(&s);
    let out = run(
        &["queues".into(), "list".into(), "--server".into(), http],
        &[],
        None,
    );
    out.code(1);
    assert!(
        out.stderr
            .contains("hint: is --server the gRPC port? (default 50051"),
        "{out:?}"
    );
    let tls = run(
        &[
            "queues".into(),
            "list".into(),
            "--server".into(),
            s.target().replace("http://", "https://"),
        ],
        &[],
        None,
    );
    tls.code(1);
    assert!(
        tls.stderr.contains("hint: the server may not use TLS"),
        "{tls:?}"
    );
    // Not an address at all: bad local input, exit 2, nothing sent.
    for bad in ["not a url", "ftp://127.0.0.1:1", "http://"] {
        let out = run(
            &[
                "queues".into(),
                "list".into(),
                "--server".into(),
                bad.into(),
            ],
            &[],
            None,
        );
        out.code(2);
        assert!(out.stderr.starts_with("jobwire: --server "), "{out:?}");
    }
}
