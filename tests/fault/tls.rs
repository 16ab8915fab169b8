//! `rediss://`: jobwire talks to a TLS-only redis-server, verifying its certificate against a
//! CA given with `SSL_CERT_FILE` (how a private CA is trusted; the system roots otherwise).
//! The certificates are made for the test with the `openssl` command.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use jobwire::pb;
use tokio::io::{AsyncBufReadExt, BufReader};
use tonic::transport::Channel;

use crate::procs::free_port;

fn openssl(dir: &Path, args: &[&str]) {
    let ok = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("openssl must be installed (Debian package openssl)")
        .success();
    assert!(ok, "openssl {args:?}");
}

/// A CA and a server certificate for localhost, in `dir`.
fn certificates(dir: &Path) {
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.crt",
            "-days",
            "2",
            "-subj",
            "/CN=jobwire-test-ca",
        ],
    );
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
            "-subj",
            "/CN=localhost",
        ],
    );
    std::fs::write(
        dir.join("ext.cnf"),
        "subjectAltName=DNS:localhost,IP:127.0.0.1\n",
    )
    .expect("write");
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "server.crt",
            "-days",
            "2",
            "-extfile",
            "ext.cnf",
        ],
    );
}

#[tokio::test]
async fn jobwire_runs_on_a_tls_only_redis() {
    let dir = tempfile::tempdir().expect("tempdir");
    certificates(dir.path());
    let port = free_port();
    let mut redis = tokio::process::Command::new("redis-server")
        .args([
            "--port",
            "0",
            "--tls-port",
            &port.to_string(),
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .args([
            "--tls-cert-file",
            "server.crt",
            "--tls-key-file",
            "server.key",
            "--tls-ca-cert-file",
            "ca.crt",
            "--tls-auth-clients",
            "no",
        ])
        .current_dir(dir.path())
        .stdout(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("redis-server");
    let mut server = tokio::process::Command::new(env!("CARGO_BIN_EXE_jobwire"))
        .args([
            "serve",
            "--log-format",
            "json",
            "--grpc-addr",
            "127.0.0.1:0",
            "--http-addr",
            "127.0.0.1:0",
        ])
        .args(["--redis-url", &format!("rediss://localhost:{port}")])
        .env("SSL_CERT_FILE", dir.path().join("ca.crt"))
        .env("RUST_LOG", "info")
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("jobwire");
    let mut lines = BufReader::new(server.stderr.take().expect("stderr")).lines();
    let grpc = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            let line = lines
                .next_line()
                .await
                .expect("read")
                .expect("jobwire exited early");
            let v: serde_json::Value = serde_json::from_str(&line).unwrap_or_default();
            if v["message"] == "jobwire serving" {
                return v["grpc"].as_str().expect("grpc").to_owned();
            }
        }
    })
    .await
    .expect("jobwire serving over a TLS redis within 30 s");
    let channel = Channel::from_shared(format!("http://{grpc}"))
        .expect("uri")
        .connect()
        .await
        .expect("connect");
    let mut jobs = pb::job_service_client::JobServiceClient::new(channel);
    let r = jobs
        .enqueue(pb::EnqueueRequest {
            job: Some(pb::JobSpec {
                queue: "tls".into(),
                job_id: "j".into(),
                name: "n".into(),
                ..Default::default()
            }),
        })
        .await
        .expect("enqueue over TLS redis")
        .into_inner();
    assert!(r.created);
    let got = jobs
        .get_job(pb::GetJobRequest {
            queue: "tls".into(),
            job_id: "j".into(),
        })
        .await
        .expect("get")
        .into_inner()
        .job
        .expect("job");
    assert_eq!(got.state, pb::JobState::Waiting as i32);
    let _ = server.start_kill();
    let _ = redis.start_kill();
}
