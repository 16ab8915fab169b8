//! The CLI over TLS: `--tls-ca` (or JOBWIRE_TLS_CA) trusts the test CA; without it the
//! handshake fails (exit 1); with mTLS required, `--tls-cert`/`--tls-key` present the
//! client certificate.

use jobwire_client::{ClientOptions, TlsOptions};

use crate::certs::{ClientId, TestPki, Validity};
use crate::harness::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_with_a_ca_file_and_mutual_tls_with_a_client_certificate() {
    let pki = TestPki::new("cli-test-ca");
    let server = pki.server("server", 1);
    let client = pki.client(
        "operator",
        ClientId::Dns("operator.jobwire.test".into()),
        Validity::Current,
    );
    let ca = pki.ca_path();
    let (cert, key) = (
        server.cert.to_string_lossy().into_owned(),
        server.key.to_string_lossy().into_owned(),
    );
    let ca_s = ca.to_string_lossy().into_owned();
    let s = Server::start_with(
        &[
            "--tls-cert",
            &cert,
            "--tls-key",
            &key,
            "--tls-client-ca",
            &ca_s,
        ],
        ClientOptions {
            tls: Some(
                TlsOptions::ca_file(&ca)
                    .expect("ca")
                    .identity_files(&client.cert, &client.key)
                    .expect("identity"),
            ),
            ..Default::default()
        },
    )
    .await;
    let c = s.client().await;
    enqueue_n(&c, "secure", "n", "s", 1).await;
    let (ccert, ckey) = (
        client.cert.to_string_lossy().into_owned(),
        client.key.to_string_lossy().into_owned(),
    );

    // The CA and the client certificate from flags...
    let v = s
        .jw(&[
            "queues",
            "stats",
            "secure",
            "--tls-ca",
            &ca_s,
            "--tls-cert",
            &ccert,
            "--tls-key",
            &ckey,
            "-o",
            "json",
        ])
        .ok_json();
    assert_eq!(v["waiting"], 1);
    // ...or from the environment.
    let v = s
        .jw_env(
            &["queues", "stats", "secure", "-o", "json"],
            &[
                ("JOBWIRE_TLS_CA", &ca_s),
                ("JOBWIRE_CLIENT_TLS_CERT", &ccert),
                ("JOBWIRE_CLIENT_TLS_KEY", &ckey),
            ],
            None,
        )
        .ok_json();
    assert_eq!(v["waiting"], 1);
    // Without the client certificate the server refuses the handshake; without the CA the
    // client does not trust the server: exit 1 either way.
    let r = s.jw(&["queues", "stats", "secure", "--tls-ca", &ca_s]);
    r.code(1);
    let r = s.jw(&["queues", "stats", "secure"]);
    r.code(1);
    // An unreadable CA file is local input: exit 2, naming the flag.
    let r = s.jw(&[
        "queues",
        "stats",
        "secure",
        "--tls-ca",
        "/nonexistent/ca.crt",
    ]);
    r.code(2);
    assert!(
        r.stderr.contains("--tls-ca /nonexistent/ca.crt"),
        "{}",
        r.stderr
    );
}
