//! Unit tests of [`super`]: parsing, defaults, range checks and redaction.

use super::*;
use clap::CommandFactory;

/// `jobwire serve ARGS` parsed (also the flag groups' own unit tests use it).
pub(super) fn serve(args: &[&str]) -> Result<ServeArgs, clap::Error> {
    let argv = ["jobwire", "serve"].iter().chain(args).copied();
    Cli::try_parse_from(argv).map(|cli| match cli.command {
        Command::Serve(a) => a,
        _ => panic!("parsed `serve` as another command"),
    })
}

#[test]
fn bench_parses_its_flags() {
    let argv = [
        "jobwire",
        "bench",
        "-n",
        "100",
        "--e2e",
        "1x16,4x64",
        "--only",
        "e2e",
    ];
    let Command::Bench(b) = Cli::try_parse_from(argv).expect("parse").command else {
        panic!("not bench");
    };
    assert_eq!(b.n, 100);
    assert_eq!(b.e2e_configs(), Ok(vec![(1, 16), (4, 64)]));
    assert!(b.wants("e2e") && !b.wants("rss"));
    assert_eq!(b.server, "http://127.0.0.1:50051");
}

#[test]
fn clap_definition_is_consistent() {
    Cli::command().debug_assert();
}

#[test]
fn defaults_are_valid_and_as_documented() {
    let a = serve(&[]).expect("parse");
    assert_eq!(a.grpc_addr, "127.0.0.1:50051".parse().expect("addr"));
    assert_eq!(a.http_addr, "0.0.0.0:9090".parse().expect("addr"));
    assert_eq!(a.redis_url, None);
    assert_eq!(a.redis_fsync, Fsync::Everysec);
    assert_eq!(a.shutdown_grace, Duration::from_secs(25));
    assert_eq!(a.lease_duration, Duration::from_secs(30));
    assert_eq!(a.max_payload_bytes, 1_048_576);
    assert_eq!(
        (a.max_checkpoint_bytes, a.max_result_bytes),
        (65_536, 65_536)
    );
    assert_eq!(a.log_format, LogFormat::Pretty);
    assert!(!a.print_config && !a.allow_eviction);
    a.validate().expect("defaults valid");
}

#[test]
fn parses_humantime_and_enums() {
    let a = serve(&[
        "--reaper-interval",
        "500ms",
        "--redis-fsync",
        "always",
        "--log-format",
        "json",
    ])
    .expect("parse");
    assert_eq!(a.reaper_interval, Duration::from_millis(500));
    assert_eq!(a.redis_fsync.as_str(), "always");
    assert_eq!(a.log_format, LogFormat::Json);
    assert!(
        serve(&["--lease-duration", "30"]).is_err(),
        "unitless duration is rejected"
    );
}

#[test]
fn validate_rejects_out_of_range() {
    let base = ServeArgs::for_tests("redis://127.0.0.1:1");
    base.validate().expect("for_tests is valid");
    type Mutate = fn(&mut ServeArgs);
    let cases: [(&str, Mutate); 20] = [
        ("lease-duration", |a| {
            a.lease_duration = Duration::from_millis(999)
        }),
        ("lease-duration", |a| {
            a.lease_duration = Duration::from_secs(3601)
        }),
        ("heartbeat-timeout", |a| {
            a.heartbeat_timeout = Duration::ZERO
        }),
        ("reaper-interval", |a| {
            a.reaper_interval = Duration::from_millis(5)
        }),
        ("reaper-interval", |a| {
            a.reaper_interval = Duration::from_secs(61)
        }),
        ("shutdown-grace", |a| {
            a.shutdown_grace = Duration::from_secs(3601)
        }),
        ("request-timeout", |a| a.request_timeout = Duration::ZERO),
        ("max-payload-bytes", |a| a.max_payload_bytes = 0),
        ("max-payload-bytes", |a| {
            a.max_payload_bytes = MAX_PAYLOAD_LIMIT + 1
        }),
        ("max-checkpoint-bytes", |a| a.max_checkpoint_bytes = 0),
        ("max-checkpoint-bytes", |a| {
            a.max_checkpoint_bytes = MAX_DATA_LIMIT + 1
        }),
        ("max-result-bytes", |a| a.max_result_bytes = 0),
        ("max-result-bytes", |a| {
            a.max_result_bytes = MAX_DATA_LIMIT + 1
        }),
        ("default-max-attempts", |a| a.default_max_attempts = 0),
        ("default-max-attempts", |a| a.default_max_attempts = 1001),
        ("redis-wait-replicas", |a| a.redis_wait_replicas = 17),
        ("redis-url", |a| {
            a.redis_url = Some("redis+cluster://:pw@h:1,,h:2".into())
        }),
        ("redis-url", |a| {
            a.redis_url = Some("redis+sentinel://:pw@s:1".into())
        }),
        ("redis-wait-timeout", |a| {
            a.redis_wait_replicas = 1;
            a.redis_wait_timeout = Duration::ZERO
        }),
        ("redis-wait-timeout", |a| {
            a.redis_wait_replicas = 1;
            a.redis_wait_timeout = a.redis_timeout
        }),
    ];
    for (flag, mutate) in cases {
        let mut a = base.clone();
        mutate(&mut a);
        let err = a.validate().expect_err(flag);
        assert!(err.contains(flag), "{err} should name {flag}");
    }
    // Without --redis-wait-replicas the wait timeout is unused: a short --redis-timeout
    // alone is valid.
    let mut a = base.clone();
    a.redis_timeout = Duration::from_millis(500);
    a.validate()
        .expect("no wait: the wait timeout is not checked");
}

#[test]
fn debug_redacts_redis_password() {
    let a = ServeArgs::for_tests("redis://alice:s3cret@redis.internal:6380/0");
    let shown = format!("{a:?}");
    assert!(
        !shown.contains("s3cret") && !shown.contains("alice"),
        "{shown}"
    );
    assert!(
        shown.contains("redis://***@redis.internal:6380/0"),
        "{shown}"
    );
}

#[test]
fn redact_url_cases() {
    assert_eq!(redact_url("redis://:pw@h:1"), "redis://***@h:1");
    assert_eq!(redact_url("rediss://u:p@w@h/2"), "rediss://***@h/2");
    assert_eq!(redact_url("redis://h:1/0"), "redis://h:1/0");
    assert_eq!(
        redact_url("redis+cluster://u:pw@a:1,b:2"),
        "redis+cluster://***@a:1,b:2"
    );
    assert_eq!(
        redact_url("redis+sentinel://:p@w@s1:1,s2:2/mymaster"),
        "redis+sentinel://***@s1:1,s2:2/mymaster"
    );
    assert_eq!(redact_url("redis://u:a/b@h:1/0"), "redis://***@h:1/0");
    assert_eq!(
        redact_url("redis+unix:///tmp/r.sock?db=1&pass=pw&user=u"),
        "redis+unix:///tmp/r.sock?db=1&pass=***&user=u"
    );
}

#[test]
fn help_never_shows_the_redis_url_value() {
    let cmd = Cli::command();
    let serve = cmd.find_subcommand("serve").expect("serve");
    let arg = serve
        .get_arguments()
        .find(|a| a.get_id() == "redis_url")
        .expect("redis_url");
    assert!(arg.is_hide_env_values_set());
}

#[test]
fn print_config_lists_every_variable_with_secrets_redacted() {
    let mut cfg = ServeArgs::for_tests("redis://user:hunter2@db:6379/0");
    cfg.shutdown_grace = Duration::from_millis(1500);
    let text = cfg.effective();
    assert!(!text.contains("hunter2"), "{text}");
    assert!(
        text.contains("JOBWIRE_REDIS_URL=redis://***@db:6379/0"),
        "{text}"
    );
    assert!(text.contains("JOBWIRE_SHUTDOWN_GRACE=1s 500ms"), "{text}");
    assert!(text.contains("JOBWIRE_LOG_FORMAT=pretty"), "{text}");
    let help = Cli::command().render_long_help().to_string();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let var = line.split('=').next().unwrap_or_default();
        assert!(
            help.contains(var)
                || Cli::command().find_subcommand("serve").is_some_and(|s| s
                    .clone()
                    .render_long_help()
                    .to_string()
                    .contains(var)),
            "{var} is not a documented variable"
        );
    }
}

#[test]
fn tls_flags_come_in_pairs_are_read_at_validation_and_show_in_print_config() {
    let err = |args: &[&str]| serve(args).expect("parse").validate().expect_err("refused");
    assert_eq!(
        err(&["--tls-cert", "/none/server.crt"]),
        "--tls-cert needs --tls-key"
    );
    assert_eq!(
        err(&["--tls-key", "/none/server.key"]),
        "--tls-key needs --tls-cert"
    );
    assert_eq!(
        err(&["--tls-client-ca", "/none/ca.crt"]),
        "--tls-client-ca needs --tls-cert and --tls-key"
    );
    let e = err(&["--tls-cert", "/none/server.crt", "--tls-key", "/none/k"]);
    assert!(
        e.starts_with("--tls-cert /none/server.crt: cannot read"),
        "{e}"
    );
    assert!(err(&["--tls-reload-interval", "10ms"]).contains("--tls-reload-interval"));
    let cfg = serve(&["--tls-cert", "/c.pem", "--tls-key", "/k.pem"]).expect("parse");
    assert_eq!(cfg.tls.tls_reload_interval, Duration::from_secs(2));
    let text = cfg.effective();
    assert!(text.contains("JOBWIRE_TLS_CERT=/c.pem"), "{text}");
    assert!(text.contains("JOBWIRE_TLS_KEY=/k.pem"), "{text}");
    assert!(text.contains("JOBWIRE_TLS_RELOAD_INTERVAL=2s"), "{text}");
    assert!(ServeArgs::for_tests("redis://x").validate().is_ok());
}

#[test]
fn bench_token_is_never_shown() {
    let argv = ["jobwire", "bench", "--token", "jw_abc_s3cret"];
    let Command::Bench(b) = Cli::try_parse_from(argv).expect("parse").command else {
        panic!("not bench");
    };
    assert!(!format!("{b:?}").contains("s3cret"));
    assert_eq!(
        b.token.as_ref().map(|t| t.0.as_str()),
        Some("jw_abc_s3cret")
    );
}

#[test]
fn a_non_loopback_grpc_addr_needs_an_auth_file_or_insecure() {
    let open = serve(&["--grpc-addr", "0.0.0.0:50051"]).expect("parse");
    let e = open.validate().expect_err("no auth file, not loopback");
    assert!(
        e.contains("--grpc-addr 0.0.0.0:50051") && e.contains("--auth-file"),
        "{e}"
    );
    for ok in [
        &["--grpc-addr", "0.0.0.0:50051", "--insecure"][..],
        &["--grpc-addr", "0.0.0.0:50051", "--auth-file", "auth.yaml"][..],
        &["--grpc-addr", "[::1]:50051"][..],
        &["--grpc-addr", "127.0.0.2:50051"][..],
    ] {
        serve(ok).expect("parse").validate().expect("allowed");
    }
    let e = serve(&["--auth-file", "auth.json"])
        .expect("parse")
        .validate()
        .expect_err("extension");
    assert!(e.contains("--auth-file auth.json"), "{e}");
    let printed = serve(&["--auth-file", "/etc/jobwire/auth.yaml", "--insecure"])
        .expect("parse")
        .effective();
    assert!(
        printed.contains("JOBWIRE_AUTH_FILE=/etc/jobwire/auth.yaml\n"),
        "{printed}"
    );
    assert!(printed.contains("JOBWIRE_INSECURE=true\n"), "{printed}");
}

#[test]
fn ui_flags_parse_print_and_keep_an_open_dashboard_on_loopback() {
    let a = serve(&[]).expect("parse");
    assert!(!a.ui.enabled && !a.ui.read_only && !a.ui.cookie_secure);
    assert_eq!(a.ui.session_idle, Duration::from_secs(30 * 60));
    let a = serve(&[
        "--ui",
        "--ui-read-only",
        "--ui-session-idle",
        "5m",
        "--http-addr",
        "127.0.0.1:9090",
    ])
    .expect("parse");
    assert!(a.ui.enabled && a.ui.read_only);
    assert_eq!(a.ui.session_idle, Duration::from_secs(300));
    a.validate().expect("loopback without an auth file is fine");
    let printed = a.effective();
    for line in [
        "JOBWIRE_UI=true",
        "JOBWIRE_UI_READ_ONLY=true",
        "JOBWIRE_UI_SESSION_IDLE=5m",
        "JOBWIRE_UI_SESSION_MAX=12h",
        "JOBWIRE_UI_COOKIE_SECURE=false",
    ] {
        assert!(printed.lines().any(|l| l == line), "{line} in {printed}");
    }
    // The default --http-addr is 0.0.0.0: an open dashboard there needs --insecure.
    let e = serve(&["--ui"])
        .expect("parse")
        .validate()
        .expect_err("refused");
    assert!(e.contains("--ui") && e.contains("--auth-file"), "{e}");
    serve(&["--ui", "--insecure"])
        .expect("parse")
        .validate()
        .expect("said out loud");
    serve(&["--ui", "--auth-file", "/etc/jobwire/auth.yaml"])
        .expect("parse")
        .ui
        .check_bind(true, false, "0.0.0.0:9090".parse().expect("addr"))
        .expect("an auth file makes it safe");
    let e = serve(&["--ui-session-idle", "10s"])
        .expect("parse")
        .validate()
        .expect_err("too short");
    assert!(e.contains("--ui-session-idle"), "{e}");
}
