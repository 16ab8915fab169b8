//! The shared conformance scenarios (`clients/conformance/scenarios.json`), each against a
//! real `jobwire serve` this test starts. `every_scenario_has_a_test` fails when the file
//! names a scenario not implemented here.

#[path = "../support/mod.rs"]
mod support;

mod cancel;
mod errors;
mod groups;
mod liveness;
mod progress;
mod replication;
mod shutdown;
mod slots;

use std::collections::BTreeSet;

/// The scenario ids implemented by this suite (one test each, named after the id).
const IMPLEMENTED: &[&str] = &[
    "concurrency_never_exceeded",
    "long_handler_not_redelivered",
    "non_retryable_dead_letters",
    "retry_after_honoured",
    "rate_limited_uses_no_attempt",
    "sigterm_drains",
    "shutdown_hands_back_uncharged",
    "server_restart_mid_run",
    "stream_killed_by_network",
    "cancel_reaches_running_handler",
    "checkpoint_resumes_next_attempt",
    "result_attached_at_ack",
    "cancel_delete_expire_from_client",
    "group_key_and_pause_group",
    "unreplicated_enqueue_exists_once",
];

/// The scenario file, parsed.
pub fn scenarios() -> serde_json::Value {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../conformance/scenarios.json");
    let text = std::fs::read_to_string(&path).expect("read scenarios.json");
    serde_json::from_str(&text).expect("scenarios.json is JSON")
}

/// Scenario `id`'s `server` flags and `params`.
pub fn scenario(id: &str) -> (Vec<String>, serde_json::Value) {
    let all = scenarios();
    let s = all["scenarios"]
        .as_array()
        .expect("scenarios array")
        .iter()
        .find(|s| s["id"] == id)
        .unwrap_or_else(|| panic!("scenario {id} not in scenarios.json"))
        .clone();
    let flags = s["server"]
        .as_array()
        .expect("server flags")
        .iter()
        .map(|f| f.as_str().expect("flag").to_owned())
        .collect();
    (flags, s["params"].clone())
}

/// A millisecond or count parameter of a scenario.
pub fn param(params: &serde_json::Value, name: &str) -> u64 {
    params[name]
        .as_u64()
        .unwrap_or_else(|| panic!("param {name} missing"))
}

/// A server with scenario `id`'s flags.
pub async fn server_for(id: &str) -> (jobwire_client::testing::TestServer, serde_json::Value) {
    let (flags, params) = scenario(id);
    let args: Vec<&str> = flags.iter().map(String::as_str).collect();
    (support::server(&args).await, params)
}

#[test]
fn every_scenario_has_a_test() {
    let listed: BTreeSet<String> = scenarios()["scenarios"]
        .as_array()
        .expect("scenarios array")
        .iter()
        .map(|s| s["id"].as_str().expect("id").to_owned())
        .collect();
    let implemented: BTreeSet<String> = IMPLEMENTED.iter().map(|s| (*s).to_owned()).collect();
    let missing: Vec<_> = listed.difference(&implemented).collect();
    assert!(
        missing.is_empty(),
        "scenarios without a Rust test: {missing:?}"
    );
}
