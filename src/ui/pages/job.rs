//! `GET /ui/queues/{queue}/jobs/{job_id}`: one job (GetJob): state, attempts, the bounded
//! error history, the payload (pretty JSON when it parses, a hex dump otherwise, capped),
//! metadata and trace id; replay and delete buttons when it is dead and the principal may.

use std::collections::BTreeMap;

use axum::http::StatusCode;
use axum::response::Response;
use maud::{html, Markup};

use super::layout;
use crate::auth::Rpc;
use crate::pb;
use crate::ui::components::{
    dead_url, dur, job_url, or_none, queue_url, reason_name, scroll, since, state_name, ts, ts_el,
};
use crate::ui::visitor::Visitor;

/// Most payload text shown: 64 KiB of pretty JSON, or a hex dump of the first 32 KiB.
pub const PAYLOAD_CAP: usize = 64 * 1024;

/// The job page.
pub async fn get(v: &Visitor, queue: &str, job_id: &str) -> Response {
    let job = match v.caller.get_job(queue, job_id).await {
        Ok(j) => j,
        Err(s) if s.code() == tonic::Code::NotFound => {
            // Say which is missing: the queue (a typo'd URL) or the job.
            return match super::unknown_queue(v, queue).await {
                Some(r) => r,
                None => v.failed(s),
            };
        }
        Err(s) => return v.failed(s),
    };
    let body = html! {
        p.crumbs {
            a href=(queue_url(queue)) { (queue) } " / job"
        }
        h1 { "Job " code { (job.job_id) } }
        (summary(&job))
        (actions(v, &job))
        h2 { "Errors" }
        (errors(&job))
        h2 { "Payload" }
        (payload(&job.payload, &job.content_type))
        @if !job.result.is_empty() {
            h2 { "Result" }
            (bytes_block("result", &job.result))
        }
        @if !job.checkpoint.is_empty() {
            h2 { "Checkpoint" }
            p.muted { "The next attempt receives it in its lease." }
            (bytes_block("checkpoint", &job.checkpoint))
        }
        h2 { "Metadata" }
        (metadata(&job.metadata))
    };
    v.page(
        StatusCode::OK,
        layout(v, &format!("Job {}", job.job_id), body),
    )
}

fn summary(job: &pb::Job) -> Markup {
    let trace = job
        .metadata
        .get("traceparent")
        .and_then(|tp| crate::jobs::trace_id(tp));
    html! {
        dl.facts {
            dt { "State" } dd #job-state data-state=(state_name(job.state)) { (state_name(job.state)) }
            @if !reason_name(job.dead_reason).is_empty() {
                dt { "Dead reason" } dd #dead-reason { (reason_name(job.dead_reason)) }
            }
            @if job.cancel_time.is_some() {
                dt { "Cancel requested" } dd #cancel-time { (ts(job.cancel_time.as_ref())) }
                dt { "Cancel reason" } dd #cancel-reason { (or_none(job.cancel_reason.clone())) }
            }
            dt { "Name" } dd #job-name { (job.name) }
            dt { "Group" }
            dd #job-group {
                @if job.group_key.is_empty() { span.muted { "default" } } @else { code { (job.group_key) } }
            }
            dt { "Attempts" } dd #attempts { (job.attempts_made) " of " (job.max_attempts) }
            dt { "Replays" } dd { (job.replays) }
            dt { "Priority" } dd { (job.priority) }
            dt { "Timeout" } dd #job-timeout { (or_none(dur(job.timeout.as_ref()))) }
            dt { "Created" } dd { (ts(job.create_time.as_ref())) }
            dt { "Ready" } dd { (ts(job.ready_time.as_ref())) }
            @if job.expire_time.is_some() {
                dt { "Expires" } dd #expire-time { (ts(job.expire_time.as_ref())) }
            }
            dt { "Leased" } dd { (ts(job.lease_time.as_ref())) }
            @if job.state == pb::JobState::Active as i32 {
                dt { "Running for" } dd #running-for { (since(job.lease_time.as_ref())) }
                dt { "Held by" } dd #lease-holder { (or_none(job.worker_id.clone())) }
                dt { "Lease deadline" } dd #lease-deadline { (ts(job.lease_deadline.as_ref())) }
            }
            @if job.progress_time.is_some() {
                dt { "Progress" }
                dd #progress {
                    progress max="100" value=(job.progress) { (job.progress) "%" }
                    " " (job.progress) "%"
                    @if !job.progress_message.is_empty() { " — " (job.progress_message) }
                    " " span.muted { "(" (ts(job.progress_time.as_ref())) ")" }
                }
            }
            dt { "Finished" } dd { (ts(job.finish_time.as_ref())) }
            dt { "Idempotency key" } dd { code { (job.idempotency_key) } }
            dt { "Trace id" }
            dd #trace-id {
                @match trace { Some(t) => code { (t) }, None => span.muted { "none" } }
            }
        }
    }
}

fn actions(v: &Visitor, job: &pb::Job) -> Markup {
    let dead = job.state == pb::JobState::Dead as i32;
    let replay = dead && v.can(Rpc::ReplayDeadLetters, &job.queue);
    let delete = dead && v.can(Rpc::DeleteDeadLetters, &job.queue);
    let url = job_url(&job.queue, &job.job_id);
    html! {
        @if replay || delete {
            div.actions {
                @if replay {
                    form method="post" action={ (url) "/replay" } {
                        input type="hidden" name="csrf" value=(v.csrf());
                        button type="submit" data-action="replay" { "Replay" }
                    }
                }
                @if delete {
                    form method="post" action={ (url) "/delete" } {
                        input type="hidden" name="csrf" value=(v.csrf());
                        button.danger type="submit" data-action="delete" { "Delete" }
                    }
                }
            }
        }
        @if dead {
            p { a href=(dead_url(&job.queue)) { "All dead jobs of " (job.queue) } }
        }
    }
}

fn errors(job: &pb::Job) -> Markup {
    html! {
        div #errors {
            @if job.errors.is_empty() {
                p.empty { "No failed attempts." }
            } @else {
                @if job.errors_dropped > 0 {
                    p.note { (job.errors_dropped) " failed attempts between the first and the "
                        "newest were dropped to keep the history bounded." }
                }
                (scroll(html! { table.errors {
                    thead { tr {
                        th.num { "Attempt" } th { "Failed at" } th { "Type" } th { "Message" }
                        th { "Disposition" } th { "Worker" } th { "Retry in" }
                    } }
                    tbody {
                        @for e in &job.errors {
                            tr {
                                td.num { (e.attempt) }
                                td { (ts_el(e.fail_time.as_ref())) }
                                td { code { (e.error_type) } }
                                td.msg-full {
                                    (e.message)
                                    @if !e.details.is_empty() {
                                        details { summary { "details" } pre { (e.details) } }
                                    }
                                }
                                td { (disposition(e.disposition)) }
                                td { (e.worker_id) }
                                td { (dur(e.retry_delay.as_ref())) }
                            }
                        }
                    }
                } }))
            }
        }
    }
}

fn disposition(d: i32) -> String {
    pb::FailDisposition::try_from(d)
        .map(|d| {
            d.as_str_name()
                .trim_start_matches("FAIL_DISPOSITION_")
                .to_ascii_lowercase()
        })
        .unwrap_or_default()
}

/// The payload as shown: (text, is JSON, bytes left out).
pub fn payload_text(bytes: &[u8]) -> (String, bool, usize) {
    if let Ok(v) = serde_json::from_slice::<serde_json::Value>(bytes) {
        let pretty = serde_json::to_string_pretty(&v).unwrap_or_default();
        if pretty.len() <= PAYLOAD_CAP {
            return (pretty, true, 0);
        }
        let mut cut = PAYLOAD_CAP;
        while !pretty.is_char_boundary(cut) {
            cut -= 1;
        }
        let shown = pretty[..cut].to_owned();
        let left = pretty.len() - cut;
        return (shown, true, left);
    }
    let take = bytes.len().min(PAYLOAD_CAP / 2);
    let mut out = String::with_capacity(take * 2 + take / 16);
    for (i, chunk) in bytes[..take].chunks(32).enumerate() {
        if i > 0 {
            out.push('\n');
        }
        out.push_str(&hex::encode(chunk));
    }
    (out, false, bytes.len() - take)
}

fn payload(bytes: &[u8], content_type: &str) -> Markup {
    let (text, json, left) = payload_text(bytes);
    html! {
        p.muted {
            (bytes.len()) " bytes"
            @if !content_type.is_empty() { ", " code { (content_type) } }
            @if json { ", JSON" } @else if !bytes.is_empty() { ", not JSON: shown as hex" }
        }
        pre #payload data-format=(if json { "json" } else { "hex" }) { (text) }
        @if left > 0 {
            p #payload-note .note {
                "Capped at 64 KiB: " (left)
                @if json { " more characters" } @else { " more bytes" }
                " not shown."
            }
        }
    }
}

/// Result or checkpoint bytes (`id` names the element), shown as the payload is.
fn bytes_block(id: &str, bytes: &[u8]) -> Markup {
    let (text, json, left) = payload_text(bytes);
    html! {
        p.muted {
            (bytes.len()) " bytes"
            @if json { ", JSON" } @else { ", not JSON: shown as hex" }
        }
        pre id=(id) data-format=(if json { "json" } else { "hex" }) { (text) }
        @if left > 0 { p.note { "Capped: " (left) " more not shown." } }
    }
}

fn metadata(m: &std::collections::HashMap<String, String>) -> Markup {
    let sorted: BTreeMap<&String, &String> = m.iter().collect();
    html! {
        @if sorted.is_empty() {
            dl #metadata .facts { }
            p.empty { "No metadata." }
        } @else {
            dl #metadata .facts {
                @for (k, val) in sorted { dt { (k) } dd { code { (val) } } }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payload_is_pretty_json_or_capped_hex() {
        let (t, json, left) = payload_text(br#"{"a":1}"#);
        assert!(json && left == 0);
        assert_eq!(t, "{\n  \"a\": 1\n}");
        let (t, json, left) = payload_text(&[0xff, 0x00, 0x41]);
        assert!(!json && left == 0);
        assert_eq!(t, "ff0041");
        let big = vec![0xffu8; 100_000];
        let (t, json, left) = payload_text(&big);
        assert!(!json);
        assert_eq!(left, 100_000 - PAYLOAD_CAP / 2);
        assert!(t.len() <= PAYLOAD_CAP + PAYLOAD_CAP / 64, "{}", t.len());
        let big_json = serde_json::to_vec(&vec!["x"; 40_000]).expect("json");
        let (t, json, left) = payload_text(&big_json);
        assert!(json && left > 0 && t.len() <= PAYLOAD_CAP);
    }
}
