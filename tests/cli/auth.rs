//! The CLI against a server with an auth file: it is authorized like any client. A viewer
//! lists but cannot replay (PERMISSION_DENIED, exit 1, nothing changed); no token is
//! UNAUTHENTICATED; the admin's token from JOBWIRE_TOKEN works.

use jobwire::auth::token::Token;
use jobwire_client::ClientOptions;

use crate::dlq::make_incident;
use crate::harness::*;

fn entry(name: &str, token: &Token, roles: &str) -> String {
    format!(
        "  - name: {name}\n    tokens:\n      - id: {id}\n        sha256: {hash:?}\n    grants:\n      - queues: [\"*\"]\n        roles: [{roles}]\n",
        id = token.id,
        hash = token.secret_hash().to_hex()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_viewer_cannot_replay_and_no_token_is_unauthenticated() {
    let admin = Token::generate("ops").expect("token");
    let viewer = Token::generate("oncall").expect("token");
    let dir = tempfile::tempdir().expect("tmp");
    let file = dir.path().join("auth.yaml");
    std::fs::write(
        &file,
        format!(
            "principals:\n{}{}",
            entry("ops", &admin, "producer, worker, viewer, admin"),
            entry("oncall", &viewer, "viewer")
        ),
    )
    .expect("write auth file");
    let file = file.to_string_lossy().into_owned();
    let s = Server::start_with(
        &["--auth-file", &file],
        ClientOptions {
            token: Some(admin.reveal()),
            ..Default::default()
        },
    )
    .await;
    let c = s.client().await;
    make_incident(&c, 2, 0).await;
    let (admin, viewer) = (admin.reveal(), viewer.reveal());

    // The viewer reads...
    let v = s
        .jw_env(
            &["dlq", "list", "emails", "-o", "json"],
            &[("JOBWIRE_TOKEN", &viewer)],
            None,
        )
        .ok_json();
    assert_eq!(v["dead_letters"].as_array().expect("list").len(), 2);
    // ...but may not replay: the server says so, exit 1, nothing changed.
    let r = s.jw(&["dlq", "replay", "emails", "--yes", "--token", &viewer]);
    r.code(1);
    assert!(
        r.stderr.starts_with("jobwire: PERMISSION_DENIED: "),
        "{}",
        r.stderr
    );
    assert_eq!(r.stderr.lines().count(), 1, "{}", r.stderr);
    let st = stats(&c, "emails").await;
    assert_eq!((st.dead, st.waiting), (2, 0));
    let r = s.jw(&["queues", "pause", "emails", "--token", &viewer]);
    r.code(1);
    assert!(r.stderr.contains("PERMISSION_DENIED"), "{}", r.stderr);
    assert!(!stats(&c, "emails").await.paused);

    // No token at all.
    let r = s.jw(&["queues", "list"]);
    r.code(1);
    assert!(
        r.stderr.starts_with("jobwire: UNAUTHENTICATED: "),
        "{}",
        r.stderr
    );
    // The hint names the CLI's settings, not gRPC metadata.
    assert!(
        r.stderr.contains("hint: set JOBWIRE_TOKEN or pass --token"),
        "{}",
        r.stderr
    );
    // An empty JOBWIRE_TOKEN is no token (UNAUTHENTICATED with the hint), not a bad one.
    let r = s.jw_env(&["queues", "list"], &[("JOBWIRE_TOKEN", "")], None);
    r.code(1);
    assert!(
        r.stderr.starts_with("jobwire: UNAUTHENTICATED: "),
        "{}",
        r.stderr
    );
    // A token that is not ASCII: refused locally.
    s.jw(&["queues", "list", "--token", "jw_ops_é"]).code(2);

    // The admin, from the environment: the replay goes through.
    let v = s
        .jw_env(
            &["dlq", "replay", "emails", "--yes", "-o", "json"],
            &[("JOBWIRE_TOKEN", &admin)],
            None,
        )
        .ok_json();
    assert_eq!(v["replayed"], 2);
    let st = stats(&c, "emails").await;
    assert_eq!((st.dead, st.waiting), (0, 2));
}
