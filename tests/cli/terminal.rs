//! Confirmation prompts on a real terminal: the CLI runs under `script` (util-linux, in
//! Debian's essential bsdutils), which gives it a pseudo-terminal and types our answer.
//! "n" changes nothing (exit 1); "y" goes ahead.

use std::io::Write;
use std::process::{Command, Stdio};

use crate::dlq::make_incident;
use crate::harness::*;

/// Runs `jobwire <args>` on a pseudo-terminal, answering `answer`; (exit code, output).
fn on_terminal(s: &Server, args: &str, answer: &str) -> (i32, String) {
    let cmd = format!("{BIN} {args} --server {}", s.target());
    let mut child = Command::new("script")
        .args(["-qec", &cmd, "/dev/null"])
        .env_remove("JOBWIRE_TOKEN")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run script (bsdutils)");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(answer.as_bytes())
        .expect("answer");
    let o = child.wait_with_output().expect("wait");
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminal_gets_a_prompt_and_only_yes_acts() {
    let s = Server::start(&[]).await;
    let c = s.client().await;
    make_incident(&c, 3, 0).await;

    let (code, out) = on_terminal(&s, "dlq replay emails --error-type smtp_timeout", "n\n");
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("Replay 3 dead jobs of queue emails? [y/N]"),
        "{out}"
    );
    assert!(out.contains("not confirmed: nothing was changed"), "{out}");
    assert_eq!(stats(&c, "emails").await.dead, 3);

    let (code, out) = on_terminal(&s, "dlq replay emails --error-type smtp_timeout", "y\n");
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("Replayed 3 dead jobs of queue emails"),
        "{out}"
    );
    let st = stats(&c, "emails").await;
    assert_eq!((st.dead, st.waiting), (0, 3));

    // Nothing matches: no prompt, no 0/0 progress bar.
    let (code, out) = on_terminal(&s, "dlq replay emails --error-type smtp_timeout", "");
    assert_eq!(code, 0, "{out}");
    assert_eq!(
        out.trim_end(),
        "Nothing matches: no dead job of queue emails to replay."
    );
}
