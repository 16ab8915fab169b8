//! `jobwire jobs get|enqueue`: payload from an argument, a file or stdin; options; not found.

use crate::harness::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_enqueue_from_argument_file_and_stdin_then_get() {
    let s = Server::start(&[]).await;
    let c = s.client().await;

    // A JSON argument: content type application/json by default; options and metadata.
    let v = s
        .jw(&[
            "jobs",
            "enqueue",
            "emails",
            "send-welcome-email",
            r#"{"to":"ada@example.com"}"#,
            "--id",
            "welcome:ada",
            "--priority",
            "-5",
            "--max-attempts",
            "3",
            "--metadata",
            "tenant=acme",
            "--metadata",
            "trace=t=1",
            "-o",
            "json",
        ])
        .ok_json();
    assert_eq!(v["created"], true);
    assert_eq!(v["job"]["job_id"], "welcome:ada");
    assert_eq!(v["job"]["state"], "waiting");
    let job = c.get_job("emails", "welcome:ada").await.expect("get");
    assert_eq!(job.content_type, "application/json");
    assert_eq!(job.payload, br#"{"to":"ada@example.com"}"#);
    assert_eq!(job.priority, -5);
    assert_eq!(job.max_attempts, 3);
    assert_eq!(job.metadata.get("tenant").map(String::as_str), Some("acme"));
    assert_eq!(job.metadata.get("trace").map(String::as_str), Some("t=1"));
    // The same id again: nothing changes, created false, exit 0.
    let v = s
        .jw(&[
            "jobs",
            "enqueue",
            "emails",
            "other",
            "x",
            "--id",
            "welcome:ada",
            "-o",
            "json",
        ])
        .ok_json();
    assert_eq!(v["created"], false);
    assert_eq!(v["job"]["name"], "send-welcome-email");

    // A file of bytes that are not UTF-8: no content type; get prints them as base64.
    let dir = tempfile::tempdir().expect("tmp");
    let f = dir.path().join("blob.bin");
    std::fs::write(&f, [0xffu8, 0x00, 0x10]).expect("write");
    let fs = f.to_string_lossy().into_owned();
    let v = s
        .jw(&[
            "jobs", "enqueue", "blobs", "resize", "--file", &fs, "--delay", "1h", "-o", "json",
        ])
        .ok_json();
    let id = v["job"]["job_id"]
        .as_str()
        .expect("server-made id")
        .to_owned();
    assert_eq!(v["job"]["state"], "delayed");
    let g = s.jw(&["jobs", "get", "blobs", &id, "-o", "json"]).ok_json();
    assert_eq!(g["payload_encoding"], "base64");
    assert_eq!(g["payload"], "/wAQ");
    assert_eq!(g["content_type"], "");
    assert!(g["ready_time"].as_str().expect("ready_time").ends_with('Z'));

    // stdin with `-`, text that is not JSON: no content type; --content-type wins.
    let v = s
        .jw_env(
            &["jobs", "enqueue", "texts", "say", "-", "-o", "json"],
            &[],
            Some(b"hello\nworld"),
        )
        .ok_json();
    let id = v["job"]["job_id"].as_str().expect("id").to_owned();
    let job = c.get_job("texts", &id).await.expect("get");
    assert_eq!(job.payload, b"hello\nworld");
    assert_eq!(job.content_type, "");
    let v = s
        .jw(&[
            "jobs",
            "enqueue",
            "texts",
            "say",
            "{}",
            "--content-type",
            "text/plain",
            "-o",
            "json",
        ])
        .ok_json();
    assert_eq!(v["job"]["content_type"], "text/plain");

    // The table: key-value lines.
    let t = s.jw(&["jobs", "get", "emails", "welcome:ada"]);
    t.code(0);
    assert!(
        t.stdout.contains("state:") && t.stdout.contains("waiting"),
        "{}",
        t.stdout
    );

    // Not found: exit 3, one line with the code.
    let nf = s.jw(&["jobs", "get", "emails", "nobody"]);
    nf.code(3);
    assert!(
        nf.stderr.starts_with("jobwire: NOT_FOUND: "),
        "{}",
        nf.stderr
    );
    // Bad local input: exit 2, nothing sent.
    let before = stats(&c, "emails").await.waiting;
    let r = s.jw(&[
        "jobs",
        "enqueue",
        "emails",
        "x",
        "{}",
        "--metadata",
        "novalue",
    ]);
    r.code(2);
    assert!(r.stderr.contains("--metadata"), "{}", r.stderr);
    s.jw(&[
        "jobs",
        "enqueue",
        "emails",
        "x",
        "--file",
        "/nonexistent/file",
    ])
    .code(2);
    s.jw(&[
        "jobs", "enqueue", "emails", "x", "{}", "--delay", "tomorrow",
    ])
    .code(2);
    assert_eq!(stats(&c, "emails").await.waiting, before);
    // The server refuses a bad field: exit 1 naming it.
    let r = s.jw(&["jobs", "enqueue", "emails", "x", "{}", "--priority", "5000"]);
    r.code(1);
    assert!(
        r.stderr.starts_with("jobwire: INVALID_ARGUMENT: "),
        "{}",
        r.stderr
    );
    assert!(r.stderr.contains("priority"), "{}", r.stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_cancel_one_by_filter_and_delete() {
    let s = Server::start(&[]).await;
    let c = s.client().await;
    enqueue_n(&c, "cx", "report", "r", 3).await;
    enqueue_n(&c, "cx", "mail", "m", 2).await;

    // One job by id: cancelled, then a second time not.
    let v = s
        .jw(&[
            "jobs",
            "cancel",
            "cx",
            "r-0",
            "--reason",
            "not needed",
            "-o",
            "json",
        ])
        .ok_json();
    assert_eq!(v["cancelled"], true);
    assert_eq!(v["job"]["state"], "cancelled");
    let again = s.jw(&["jobs", "cancel", "cx", "r-0"]);
    again.code(0);
    assert!(
        again.stdout.contains("not cancelled: it is cancelled"),
        "{}",
        again.stdout
    );
    let job = c.get_job("cx", "r-0").await.expect("get");
    assert_eq!(job.cancel_reason, "not needed");

    // By filter: the other reports.
    let v = s
        .jw(&["jobs", "cancel", "cx", "--name", "report", "-o", "json"])
        .ok_json();
    assert_eq!(
        (v["cancelled"].as_u64(), v["signalled"].as_u64()),
        (Some(2), Some(0))
    );
    assert_eq!(stats(&c, "cx").await.cancelled, 3);
    // Neither an id nor a filter: usage.
    s.jw(&["jobs", "cancel", "cx"]).code(2);
    // Unknown job: not found.
    s.jw(&["jobs", "cancel", "cx", "nope"]).code(3);

    // Delete frees the id.
    let v = s
        .jw(&["jobs", "delete", "cx", "m-0", "-o", "json"])
        .ok_json();
    assert_eq!(v["state"], "waiting");
    assert!(c.get_job("cx", "m-0").await.is_err());
    s.jw(&["jobs", "delete", "cx", "m-0"]).code(3);
}
