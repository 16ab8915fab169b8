//! `jobwire queues ...`: list, stats, pause, resume, config get/set, purge, delete.

use unicode_width::UnicodeWidthStr;

use crate::harness::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queues_list_stats_pause_resume_config_purge_and_delete() {
    let s = Server::start(&[]).await;
    let c = s.client().await;
    enqueue_n(&c, "emails", "send-welcome-email", "w", 3).await;
    enqueue_n(
        &c,
        "a-queue-with-a-rather-long-name-that-will-not-fit-in-its-column-at-all-x",
        "n",
        "x",
        1,
    )
    .await;

    // list: JSON with every queue and its counts; the table fits 100 columns.
    let v = s.jw(&["queues", "list", "-o", "json"]).ok_json();
    let qs = v["queues"].as_array().expect("queues");
    let emails = qs
        .iter()
        .find(|q| q["queue"] == "emails")
        .expect("emails listed");
    assert_eq!(emails["waiting"], 3);
    assert_eq!(emails["paused"], false);
    assert!(emails["config"].is_object());
    let table = s.jw(&["queues", "list"]);
    table.code(0);
    assert!(table.stdout.starts_with("QUEUE "), "{}", table.stdout);
    for line in table.stdout.lines() {
        assert!(line.width() <= 100, "{} columns: {line}", line.width());
    }
    assert!(
        table.stdout.contains('…'),
        "the long name is cut: {}",
        table.stdout
    );
    // YAML is the same shape.
    let y = s.jw(&["queues", "stats", "emails", "-o", "yaml"]);
    y.code(0);
    let yv: serde_json::Value = serde_norway::from_str(&y.stdout).expect("yaml");
    assert_eq!(yv["waiting"], 3);

    // pause / resume, checked through gRPC.
    let v = s.jw(&["queues", "pause", "emails", "-o", "json"]).ok_json();
    assert_eq!(v, serde_json::json!({"queue": "emails", "paused": true}));
    assert!(stats(&c, "emails").await.paused);
    assert_eq!(
        s.jw(&["queues", "stats", "emails", "-o", "json"]).ok_json()["paused"],
        true
    );
    s.jw(&["queues", "resume", "emails"]).code(0);
    assert!(!stats(&c, "emails").await.paused);

    // config set changes only the fields given (the update mask), inner fields merged.
    let v = s
        .jw(&[
            "queues",
            "config",
            "set",
            "emails",
            "--default-max-attempts",
            "5",
            "--keep-dead",
            "50",
            "-o",
            "json",
        ])
        .ok_json();
    assert_eq!(v["default_max_attempts"], 5);
    assert_eq!(v["retention"]["keep_dead"], 50);
    let v = s
        .jw(&[
            "queues",
            "config",
            "set",
            "emails",
            "--max-active",
            "7",
            "--dead-max-age",
            "1h",
            "-o",
            "json",
        ])
        .ok_json();
    assert_eq!(v["max_active"], 7);
    assert_eq!(v["default_max_attempts"], 5, "not in the mask: kept");
    assert_eq!(v["retention"]["keep_dead"], 50, "inner field kept");
    assert_eq!(v["retention"]["dead_max_age"], 3600.0);
    let cfg = c.get_queue_config("emails").await.expect("config");
    assert_eq!(cfg.max_active, Some(7));
    assert_eq!(cfg.default_max_attempts, Some(5));
    let v = s
        .jw(&[
            "queues",
            "config",
            "set",
            "emails",
            "--reset",
            "max_active",
            "-o",
            "json",
        ])
        .ok_json();
    assert_eq!(v["max_active"], serde_json::Value::Null);
    assert_eq!(
        s.jw(&["queues", "config", "get", "emails", "-o", "json"])
            .ok_json()["default_max_attempts"],
        5
    );
    // Nothing to change, or a bad duration: usage, exit 2.
    s.jw(&["queues", "config", "set", "emails"]).code(2);
    s.jw(&[
        "queues",
        "config",
        "set",
        "emails",
        "--default-timeout",
        "soon",
    ])
    .code(2);
    // A value the server refuses: exit 1 with the code and the field.
    let bad = s.jw(&[
        "queues",
        "config",
        "set",
        "emails",
        "--default-max-attempts",
        "0",
    ]);
    bad.code(1);
    assert!(
        bad.stderr.starts_with("jobwire: INVALID_ARGUMENT: "),
        "{}",
        bad.stderr
    );
    assert_eq!(bad.stderr.lines().count(), 1, "one line: {}", bad.stderr);

    // purge: refused without --yes on a non-terminal stdin (exit 2), nothing deleted.
    let r = s.jw(&["queues", "purge", "emails"]);
    r.code(2);
    assert!(r.stderr.contains("--yes"), "{}", r.stderr);
    assert_eq!(stats(&c, "emails").await.waiting, 3);
    let v = s
        .jw(&["queues", "purge", "emails", "--yes", "-o", "json"])
        .ok_json();
    assert_eq!(v["deleted"], 3);
    assert_eq!(stats(&c, "emails").await.waiting, 0);

    // delete: confirmation too; an unknown queue is NOT_FOUND, exit 3.
    s.jw(&["queues", "delete", "emails"]).code(2);
    let v = s
        .jw(&["queues", "delete", "emails", "--yes", "-o", "json"])
        .ok_json();
    assert_eq!(v["queue"], "emails");
    let listed = s.jw(&["queues", "list", "-o", "json"]).ok_json();
    assert!(!listed["queues"]
        .as_array()
        .expect("queues")
        .iter()
        .any(|q| q["queue"] == "emails"));
    let gone = s.jw(&["queues", "delete", "emails", "--yes"]);
    gone.code(3);
    assert!(
        gone.stderr.starts_with("jobwire: NOT_FOUND: "),
        "{}",
        gone.stderr
    );
}

#[tokio::test]
async fn usage_errors_exit_2_and_a_dead_server_exits_1() {
    // clap's own usage errors.
    let r = run(&["queues".into(), "stats".into()], &[], None);
    r.code(2);
    let r = run(
        &["queues".into(), "list".into(), "-o".into(), "xml".into()],
        &[],
        None,
    );
    r.code(2);
    // Nobody listening: a connection error, exit 1, one line naming the target.
    let port = jobwire_client::testing::free_port().expect("port");
    let target = format!("http://127.0.0.1:{port}");
    let r = run(
        &["queues".into(), "list".into()],
        &[("JOBWIRE_SERVER", &target)],
        None,
    );
    r.code(1);
    assert!(
        r.stderr
            .starts_with(&format!("jobwire: cannot connect to {target}")),
        "{}",
        r.stderr
    );
    assert_eq!(r.stderr.lines().count(), 1, "{}", r.stderr);
    // A client certificate without its key.
    let r = run(
        &[
            "queues".into(),
            "list".into(),
            "--tls-cert".into(),
            "/x.crt".into(),
        ],
        &[],
        None,
    );
    r.code(2);
    assert!(
        r.stderr.contains("--tls-cert and --tls-key go together"),
        "{}",
        r.stderr
    );
}
