//! `serve --worker-threads`: the server's async runtime has the threads asked for, as its
//! start-up line reports them (read from the running runtime, not from the flag).

use crate::harness::Server;

/// `worker_threads` of the server's "jobwire serving" line (JSON log format).
fn logged_worker_threads(s: &Server) -> u64 {
    let log = s.log();
    log.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["message"] == "jobwire serving")
        .and_then(|v| v["worker_threads"].as_u64())
        .unwrap_or_else(|| panic!("no 'jobwire serving' line with worker_threads in:\n{log}"))
}

#[tokio::test]
async fn serve_runs_on_the_worker_threads_asked_for() {
    for n in [1u64, 3] {
        let s = Server::start(&["--log-format", "json", "--worker-threads", &n.to_string()]).await;
        assert_eq!(logged_worker_threads(&s), n, "--worker-threads {n}");
        // The server works on it: a call answers.
        s.jw(&["queues", "list"]).code(0);
    }
}
