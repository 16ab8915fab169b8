//! `jobwire bench` over TLS: `--tls-ca` (an `http://` server taken as `https://`), a client
//! certificate for mTLS, `--tls-server-name`, and `--token` (sent, never printed).

use std::process::Command;

use crate::certs::{ClientId, TestPki, Validity};
use crate::harness::TestRedis;
use crate::tls_harness::start_tls;

#[tokio::test]
async fn the_bench_runs_over_mtls_with_a_token_it_never_prints() {
    let redis = TestRedis::start().await;
    let pki = TestPki::new("jobwire test CA");
    let client = pki.client(
        "bench",
        ClientId::Uri("spiffe://jobwire.test/bench".into()),
        Validity::Current,
    );
    let (app, _) = start_tls(&redis.url, &pki, true, Some(&client)).await;
    let s = |p: &std::path::Path| p.display().to_string();
    let args: Vec<String> = [
        "bench",
        "--server",
        &format!("http://{}", app.grpc),
        "--tls-ca",
        &s(&pki.ca_path()),
        "--tls-cert",
        &s(&client.cert),
        "--tls-key",
        &s(&client.key),
        "--tls-server-name",
        "localhost",
        "--only",
        "enqueue,e2e",
        "-n",
        "200",
        "--e2e",
        "1x16",
        "--batch",
        "50",
        "--in-flight",
        "8",
    ]
    .map(String::from)
    .to_vec();
    let out = tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_jobwire"))
            .args(&args)
            .env("JOBWIRE_TOKEN", "jw_bench_t0psecret")
            .output()
            .expect("run jobwire bench")
    })
    .await
    .expect("join");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "bench failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains("e2e: worker concurrency 16"), "{stdout}");
    assert!(
        !stdout.contains("t0psecret") && !stderr.contains("t0psecret"),
        "the token is never printed"
    );

    // Without the client certificate, the mTLS server refuses the bench.
    let ca = s(&pki.ca_path());
    let server = format!("https://{}", app.grpc);
    let out = tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_jobwire"))
            .args(["bench", "--server", &server, "--tls-ca", &ca])
            .args(["--only", "enqueue", "-n", "10"])
            .output()
            .expect("run jobwire bench")
    })
    .await
    .expect("join");
    assert!(
        !out.status.success(),
        "refused without a client certificate"
    );
}
