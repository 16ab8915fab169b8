//! The `jobwire serve` binary refuses to start on a bad TLS file, before it binds or reaches
//! Redis: exit code 64 (EX_USAGE) and a message naming the flag, the file and the problem.

use std::path::Path;
use std::process::Command;

use crate::certs::TestPki;

/// Runs `jobwire serve` with `args` (and `env`) on ports it never gets to bind and a Redis
/// nobody listens on; returns the exit code and stderr.
fn serve(args: &[&str], env: &[(&str, &Path)]) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_jobwire"))
        .args([
            "serve",
            "--grpc-addr",
            "127.0.0.1:0",
            "--http-addr",
            "127.0.0.1:0",
            "--redis-url",
            "redis://127.0.0.1:1",
        ])
        .args(args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .output()
        .expect("run jobwire");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_bad_tls_file_stops_the_start_naming_the_flag_and_the_file() {
    let pki = TestPki::new("jobwire test CA");
    let good = pki.server("server", 1);
    let other = pki.server("other", 2);
    let garbage = pki.dir().join("garbage.pem");
    std::fs::write(&garbage, "not a certificate\n").expect("write");
    let missing = pki.dir().join("missing.pem");
    let s = |p: &Path| p.display().to_string();
    let (cert, key, other_key, ca) = (s(&good.cert), s(&good.key), s(&other.key), pki.ca_path());
    let (garbage_s, missing_s) = (s(&garbage), s(&missing));
    let ca_s = s(&ca);
    let cases: Vec<(&str, Vec<&str>, Vec<&str>)> = vec![
        (
            "cert not PEM",
            vec!["--tls-cert", &garbage_s, "--tls-key", &key],
            vec!["--tls-cert", &garbage_s, "no certificate"],
        ),
        (
            "cert missing",
            vec!["--tls-cert", &missing_s, "--tls-key", &key],
            vec!["--tls-cert", &missing_s, "cannot read"],
        ),
        (
            "no key in the key file",
            vec!["--tls-cert", &cert, "--tls-key", &cert],
            vec!["--tls-key", &cert, "no private key"],
        ),
        (
            "key of another certificate",
            vec!["--tls-cert", &cert, "--tls-key", &other_key],
            vec!["--tls-key", &other_key, "does not match", &cert],
        ),
        (
            "client CA not PEM",
            vec![
                "--tls-cert",
                &cert,
                "--tls-key",
                &key,
                "--tls-client-ca",
                &garbage_s,
            ],
            vec!["--tls-client-ca", &garbage_s, "no certificate"],
        ),
        (
            "cert without key",
            vec!["--tls-cert", &cert],
            vec!["--tls-cert needs --tls-key"],
        ),
        (
            "client CA without cert and key",
            vec!["--tls-client-ca", &ca_s],
            vec!["--tls-client-ca needs --tls-cert and --tls-key"],
        ),
    ];
    for (what, args, needles) in cases {
        let (code, err) = serve(&args, &[]);
        assert_eq!(code, Some(64), "{what}: exit code; stderr:\n{err}");
        for n in needles {
            assert!(err.contains(n), "{what}: the message says {n:?}:\n{err}");
        }
    }
    // The environment twins are read the same way.
    let (code, err) = serve(
        &[],
        &[
            ("JOBWIRE_TLS_CERT", garbage.as_path()),
            ("JOBWIRE_TLS_KEY", good.key.as_path()),
        ],
    );
    assert_eq!(code, Some(64), "env: {err}");
    assert!(
        err.contains("--tls-cert") && err.contains(&garbage_s),
        "{err}"
    );
}
