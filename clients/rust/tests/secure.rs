//! TLS, mutual TLS and bearer tokens against a real server with `--tls-cert`,
//! `--tls-client-ca` and `--auth-file` (certificates from scripts/dev-certs.sh, a token from
//! `jobwire token new`): a worker and a producer with the right token work; a token without
//! the role is refused (PERMISSION_DENIED), no token is UNAUTHENTICATED; a worker whose
//! stream is refused so at open ends `run()` with that error.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use jobwire_client::testing::{ServerOptions, TestServer};
use jobwire_client::{pb, Client, ClientOptions, Ctx, EnqueueOptions, Job, TlsOptions, Worker};

/// `(token, sha256 of its secret)` from `jobwire token new --id <id>`.
fn new_token(id: &str) -> (String, String) {
    let out = Command::new(support::bin())
        .args(["token", "new", "--id", id])
        .output()
        .expect("jobwire token new");
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let token = text.lines().next().expect("token line").trim().to_owned();
    let at = text.find("sha256").expect("sha256 in the output");
    let hash: String = text[at + 6..]
        .chars()
        .skip_while(|c| !c.is_ascii_hexdigit())
        .take(64)
        .collect();
    assert!(
        token.starts_with(&format!("jw_{id}_")) && hash.len() == 64,
        "{text}"
    );
    (token, hash)
}

fn certs(dir: &Path) {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scripts/dev-certs.sh");
    let ok = Command::new("bash")
        .arg(script)
        .arg(dir)
        .status()
        .expect("dev-certs.sh (needs openssl)");
    assert!(ok.success());
}

fn tls(dir: &Path) -> TlsOptions {
    TlsOptions::ca_file(dir.join("ca.crt"))
        .expect("ca")
        .identity_files(dir.join("client.crt"), dir.join("client.key"))
        .expect("client cert")
}

#[tokio::test]
async fn tls_mtls_and_tokens() {
    support::init_tracing();
    let dir =
        std::env::temp_dir().join(format!("jobwire-client-pki-{:08x}", rand::random::<u32>()));
    certs(&dir);
    let (suite, suite_hash) = new_token("rustsuite");
    let (producer, producer_hash) = new_token("rustproducer");
    let (worker_token, worker_hash) = new_token("rustworker");
    let auth = dir.join("auth.yaml");
    let policy = format!(
        "principals:\n  - name: rustsuite\n    tokens:\n      - {{id: rustsuite, sha256: '{suite_hash}'}}\n    grants:\n      - {{queues: ['*'], roles: [producer, worker, admin]}}\n  - name: rustproducer\n    tokens:\n      - {{id: rustproducer, sha256: '{producer_hash}'}}\n    grants:\n      - {{queues: ['*'], roles: [producer]}}\n"
    );
    let worker_principal = format!(
        "  - name: rustworker\n    tokens:\n      - {{id: rustworker, sha256: '{worker_hash}'}}\n    grants:\n      - {{queues: ['*'], roles: [worker]}}\n"
    );
    std::fs::write(&auth, format!("{policy}{worker_principal}")).expect("auth file");
    let p = |f: &str| dir.join(f).to_string_lossy().into_owned();
    let with = |token: Option<&str>| ClientOptions {
        token: token.map(str::to_owned),
        tls: Some(tls(&dir)),
        ..Default::default()
    };
    let server = TestServer::start(ServerOptions {
        bin: Some(support::bin()),
        args: vec![
            "--tls-cert".into(),
            p("server.crt"),
            "--tls-key".into(),
            p("server.key"),
            "--tls-client-ca".into(),
            p("ca.crt"),
            "--auth-file".into(),
            auth.to_string_lossy().into_owned(),
        ],
        client: with(Some(&suite)),
        ..Default::default()
    })
    .await
    .expect("start a TLS server");

    // The suite's token over mTLS: produce and work.
    let client = server.client().await.expect("connect over mTLS");
    let q = support::queue("secure");
    let o = EnqueueOptions {
        job_id: Some("s".into()),
        ..Default::default()
    };
    client
        .enqueue(&q, "n", b"{}".to_vec(), o.clone())
        .await
        .expect("enqueue with the token");
    let mut worker = Worker::new(client.clone(), support::options(&q, 1));
    worker.handle("n", |_job: Job<serde_json::Value>, _ctx: Ctx| async {
        Ok(())
    });
    let w = support::run(worker);
    let job = support::finished(&client, &q, "s").await;
    w.stop().await;
    assert_eq!(job.state, pb::JobState::Completed as i32);

    // A producer's token may enqueue but not replay dead letters; no token: refused.
    let prod = Client::connect(&server.target(), with(Some(&producer)))
        .await
        .expect("connect");
    prod.enqueue(&q, "n", b"{}".to_vec(), EnqueueOptions::default())
        .await
        .expect("the producer enqueues");
    let denied = prod
        .replay_dead_letters(&q, vec!["s".into()], None)
        .await
        .expect_err("a producer cannot replay");
    assert_eq!(
        denied.code(),
        Some(tonic::Code::PermissionDenied),
        "{denied}"
    );
    let anonymous = Client::connect(&server.target(), with(None))
        .await
        .expect("connect");
    let refused = anonymous.get_job(&q, "s").await.expect_err("no token");
    assert_eq!(
        refused.code(),
        Some(tonic::Code::Unauthenticated),
        "{refused}"
    );

    // A worker whose stream is refused at open ends run() with the refusal.
    for (c, want) in [
        (&prod, tonic::Code::PermissionDenied),
        (&anonymous, tonic::Code::Unauthenticated),
    ] {
        let r = tokio::time::timeout(
            Duration::from_secs(10),
            Worker::new(c.clone(), support::options(&q, 1)).run(),
        )
        .await
        .expect("run() ends");
        assert_eq!(r.as_ref().err().and_then(|e| e.code()), Some(want), "{r:?}");
    }

    // A worker that was running and whose token is then revoked (the server reloads the auth
    // file): the stream ends, the reopen is refused, run() returns UNAUTHENTICATED instead of
    // reconnecting forever.
    let revoked = Client::connect(&server.target(), with(Some(&worker_token)))
        .await
        .expect("connect");
    let mut worker = Worker::new(revoked, support::options(&q, 1));
    worker.handle("n", |_job: Job<serde_json::Value>, _ctx: Ctx| async {
        Ok(())
    });
    let task = tokio::spawn(worker.run());
    let o = EnqueueOptions {
        job_id: Some("w".into()),
        ..Default::default()
    };
    client
        .enqueue(&q, "n", b"{}".to_vec(), o)
        .await
        .expect("enqueue");
    let job = support::finished(&client, &q, "w").await;
    assert_eq!(job.state, pb::JobState::Completed as i32, "the worker ran");
    std::fs::write(&auth, &policy).expect("revoke the worker's token");
    let r = tokio::time::timeout(Duration::from_secs(30), task)
        .await
        .expect("run() ends after the revocation")
        .expect("join");
    assert_eq!(
        r.as_ref().err().and_then(|e| e.code()),
        Some(tonic::Code::Unauthenticated),
        "{r:?}"
    );

    // A plaintext client cannot talk to a TLS server; a TLS client without the CA fails too.
    let plain = Client::connect(&server.target(), ClientOptions::default()).await;
    let plain_failed = match plain {
        Err(_) => true,
        Ok(c) => c.get_job(&q, "s").await.is_err(),
    };
    assert!(plain_failed, "plaintext against a TLS server");
    let _ = std::fs::remove_dir_all(&dir);
}
