//! The dashboard's POST handlers: pause, resume, purge (typed confirmation), replay and
//! delete of one dead job and the bulk dead-letter actions (each first a confirmation page
//! with the count, then the action). Each passes [`post_gate`] (session, origin, CSRF,
//! read-only) before anything else, then makes the gRPC call(s) with the session's token
//! and shows the result with the audit line the server recorded (see `auth::audit`).
//! The role is the RPC's to decide: a visitor the policy would refuse (`Visitor::can`)
//! skips the confirmation and form checks and makes the call at once, so that the server
//! refuses it (PERMISSION_DENIED -> 403) and audits the refusal as `denied`.

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use maud::html;

use super::api::COUNT_PAGE;
use super::components::{dead_url, job_url, queue_url};
use super::pages::dead::DeadQuery;
use super::pages::result::{self, Confirm, FIRST_IDS};
use super::routes::{Refused, UiState};
use super::visitor::{post_gate, Form, Visitor};
use crate::auth::audit::AdminAction;
use crate::auth::Rpc;

/// Ids per Replay/DeleteDeadLetters call (the RPC's maximum).
const CHUNK: usize = 1000;
/// Most dead jobs a confirmation page counts (by paging ListDeadLetters) before it says
/// "at least".
const COUNT_CAP: u64 = 200_000;

/// The line `auth::audit::record` wrote for this action, as the result page shows it.
fn audit_line(v: &Visitor, action: AdminAction, queue: &str, filter: &str, count: u64) -> String {
    format!(
        "principal={} via={} action={} queue={queue} filter={filter} count={count} outcome=done",
        v.principal.name,
        v.principal.via(),
        action.as_str()
    )
}

fn page(v: &Visitor, title: &str, text: &str, audit: &[String], back: (&str, &str)) -> Response {
    v.page(StatusCode::OK, result::result(v, title, text, audit, back))
}

/// `POST /ui/queues/{queue}/pause`.
pub async fn pause(
    State(ui): State<UiState>,
    Path(queue): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    set_paused(&ui, &queue, &headers, &body, true).await
}

/// `POST /ui/queues/{queue}/resume`.
pub async fn resume(
    State(ui): State<UiState>,
    Path(queue): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    set_paused(&ui, &queue, &headers, &body, false).await
}

/// Pause (`paused`) or resume `queue` through QueueService and show the audit line.
async fn set_paused(
    ui: &UiState,
    queue: &str,
    headers: &HeaderMap,
    body: &Bytes,
    paused: bool,
) -> Response {
    let form = Form::parse(body);
    let v = match post_gate(ui, headers, &form, true) {
        Ok(v) => v,
        Err(r) => return *r,
    };
    let (called, action, title, text) = if paused {
        (
            v.caller.pause(queue).await,
            AdminAction::PauseQueue,
            format!("Paused {queue}"),
            format!("Paused queue {queue}: no more leases until it is resumed."),
        )
    } else {
        (
            v.caller.resume(queue).await,
            AdminAction::ResumeQueue,
            format!("Resumed {queue}"),
            format!("Resumed queue {queue}."),
        )
    };
    if let Err(s) = called {
        return v.failed(s);
    }
    let line = audit_line(&v, action, queue, "", 1);
    page(
        &v,
        &title,
        &text,
        &[line],
        (&queue_url(queue), "Back to the queue"),
    )
}

/// `POST /ui/queues/{queue}/purge`: `confirm` must be the queue's name.
pub async fn purge(
    State(ui): State<UiState>,
    Path(queue): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let form = Form::parse(&body);
    let v = match post_gate(&ui, &headers, &form, true) {
        Ok(v) => v,
        Err(r) => return *r,
    };
    // One the policy refuses goes straight to the RPC (refused and audited there).
    if v.can(Rpc::PurgeQueue, &queue) && form.str("confirm") != queue {
        return v.error(
            StatusCode::BAD_REQUEST,
            &format!("confirm: type the queue's name ({queue:?}) to purge it; nothing was deleted"),
        );
    }
    let completed = form.get("include_completed").is_some();
    let dead = form.get("include_dead").is_some();
    let deleted = match v.caller.purge(&queue, completed, dead).await {
        Ok(n) => n,
        Err(s) => return v.failed(s),
    };
    let filter = format!("include_completed={completed} include_dead={dead}");
    let line = audit_line(&v, AdminAction::PurgeQueue, &queue, &filter, deleted);
    page(
        &v,
        &format!("Purged {queue}"),
        &format!("Purged {deleted} jobs from queue {queue}."),
        &[line],
        (&queue_url(&queue), "Back to the queue"),
    )
}

/// Replay or delete of dead jobs.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Op {
    Replay,
    Delete,
}

impl Op {
    fn rpc(self) -> Rpc {
        match self {
            Op::Replay => Rpc::ReplayDeadLetters,
            Op::Delete => Rpc::DeleteDeadLetters,
        }
    }
    fn action(self) -> AdminAction {
        match self {
            Op::Replay => AdminAction::ReplayDeadLetters,
            Op::Delete => AdminAction::DeleteDeadLetters,
        }
    }
    fn past(self) -> &'static str {
        match self {
            Op::Replay => "Replayed",
            Op::Delete => "Deleted",
        }
    }
    fn verb(self) -> &'static str {
        match self {
            Op::Replay => "Replay",
            Op::Delete => "Delete",
        }
    }
}

/// What the ids calls did: ids touched, ids skipped (not dead), audit lines.
struct Done {
    touched: u64,
    skipped: u64,
    audit: Vec<String>,
}

/// Replays or deletes `ids` in chunks of [`CHUNK`] (one RPC, and one audit line, each).
async fn by_ids(v: &Visitor, op: Op, queue: &str, ids: &[String]) -> Result<Done, Refused> {
    let mut done = Done {
        touched: 0,
        skipped: 0,
        audit: Vec::new(),
    };
    for chunk in ids.chunks(CHUNK) {
        let r = match op {
            Op::Replay => v.caller.replay(queue, chunk.to_vec(), None).await,
            Op::Delete => v.caller.delete(queue, chunk.to_vec(), None).await,
        };
        let (touched, skipped) = r.map_err(|s| Box::new(v.failed(s)))?;
        done.touched += touched.len() as u64;
        done.skipped += skipped.len() as u64;
        let filter = format!("job_ids({})", chunk.len());
        done.audit.push(audit_line(
            v,
            op.action(),
            queue,
            &filter,
            touched.len() as u64,
        ));
    }
    Ok(done)
}

fn outcome(op: Op, queue: &str, d: &Done) -> String {
    let mut s = format!(
        "{} {} job{} of {queue}.",
        op.past(),
        d.touched,
        if d.touched == 1 { "" } else { "s" }
    );
    if d.skipped > 0 {
        s.push_str(&format!(
            " {} skipped: no longer dead (replayed or deleted meanwhile).",
            d.skipped
        ));
    }
    s
}

async fn one_job(
    ui: UiState,
    queue: String,
    id: String,
    headers: HeaderMap,
    body: Bytes,
    op: Op,
) -> Response {
    let form = Form::parse(&body);
    let v = match post_gate(&ui, &headers, &form, true) {
        Ok(v) => v,
        Err(r) => return *r,
    };
    let here = format!("{}/{}", job_url(&queue, &id), op.verb().to_lowercase());
    // Like the bulk actions: first the confirmation (unless the RPC would refuse anyway).
    if v.can(op.rpc(), &queue) && form.get("confirmed") != Some("1") {
        let title = format!("{} dead job {id} of {queue}", op.verb());
        let question = match op {
            Op::Replay => "Replay this dead job (back to waiting, attempts reset):",
            Op::Delete => "Delete this dead job permanently:",
        };
        return v.page(
            StatusCode::OK,
            result::confirm(
                &v,
                Confirm {
                    title: &title,
                    question,
                    count: 1,
                    more: false,
                    first_ids: std::slice::from_ref(&id),
                    action: &here,
                    hidden: html! {},
                    cancel: &job_url(&queue, &id),
                },
            ),
        );
    }
    let done = match by_ids(&v, op, &queue, std::slice::from_ref(&id)).await {
        Ok(d) => d,
        Err(r) => return *r,
    };
    let back = if op == Op::Replay && done.touched == 1 {
        (job_url(&queue, &id), "The job")
    } else {
        (dead_url(&queue), "Back to the dead letters")
    };
    page(
        &v,
        &format!("{} job {id}", op.past()),
        &outcome(op, &queue, &done),
        &done.audit,
        (&back.0, back.1),
    )
}

/// `POST /ui/queues/{queue}/jobs/{job_id}/replay`.
pub async fn job_replay(
    State(ui): State<UiState>,
    Path((queue, id)): Path<(String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    one_job(ui, queue, id, headers, body, Op::Replay).await
}

/// `POST /ui/queues/{queue}/jobs/{job_id}/delete`.
pub async fn job_delete(
    State(ui): State<UiState>,
    Path((queue, id)): Path<(String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    one_job(ui, queue, id, headers, body, Op::Delete).await
}

/// Counts the dead jobs `dq` matches by paging ListDeadLetters (up to [`COUNT_CAP`]):
/// (count, first ids, capped).
async fn count(
    v: &Visitor,
    queue: &str,
    dq: &DeadQuery,
) -> Result<(u64, Vec<String>, bool), Refused> {
    let filter = dq
        .filter()
        .map_err(|e| Box::new(v.error(StatusCode::BAD_REQUEST, &e)))?;
    let (mut n, mut first, mut token) = (0u64, Vec::new(), String::new());
    loop {
        let page = v
            .caller
            .list_dead(queue, Some(filter.clone()), &token, COUNT_PAGE)
            .await
            .map_err(|s| Box::new(v.failed(s)))?;
        n += page.dead_letters.len() as u64;
        for j in page.dead_letters {
            if first.len() < FIRST_IDS {
                first.push(j.job_id);
            }
        }
        if page.next_page_token.is_empty() {
            return Ok((n, first, false));
        }
        if n >= COUNT_CAP {
            return Ok((n, first, true));
        }
        token = page.next_page_token;
    }
}

/// `POST /ui/queues/{queue}/dead`: `op` is replay-selected, delete-selected (with
/// `job_id` fields) or replay-filter, delete-filter (with the filter fields). Without
/// `confirmed=1` it shows the confirmation page; with it, it acts and shows the result.
pub async fn dead_bulk(
    State(ui): State<UiState>,
    Path(queue): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let form = Form::parse(&body);
    let opname = form.str("op").to_owned();
    let (op, by_filter) = match opname.as_str() {
        "replay-selected" => (Op::Replay, false),
        "delete-selected" => (Op::Delete, false),
        "replay-filter" => (Op::Replay, true),
        "delete-filter" => (Op::Delete, true),
        _ => (Op::Replay, false),
    };
    let v = match post_gate(&ui, &headers, &form, true) {
        Ok(v) => v,
        Err(r) => return *r,
    };
    if !matches!(
        opname.as_str(),
        "replay-selected" | "delete-selected" | "replay-filter" | "delete-filter"
    ) {
        return v.error(
            StatusCode::BAD_REQUEST,
            &format!(
                "op must be replay-selected, delete-selected, replay-filter or delete-filter, got {opname:?}"
            ),
        );
    }
    let dq = DeadQuery::from_form(&form);
    let mut ids = form.all("job_id");
    ids.retain(|id| !id.is_empty());
    ids.dedup();
    if !by_filter && ids.is_empty() && v.can(op.rpc(), &queue) {
        return v.error(
            StatusCode::BAD_REQUEST,
            "job_id: select at least one dead job (or act on all matching)",
        );
    }
    // One the policy refuses skips the confirmation: the RPC refuses (and audits) it.
    let confirmed = form.get("confirmed") == Some("1") || !v.can(op.rpc(), &queue);
    let action = dead_url(&queue);
    if !confirmed {
        let (n, first, more) = if by_filter {
            match count(&v, &queue, &dq).await {
                Ok(c) => c,
                Err(r) => return *r,
            }
        } else {
            (
                ids.len() as u64,
                ids.iter().take(FIRST_IDS).cloned().collect(),
                false,
            )
        };
        let title = format!("{} dead jobs of {queue}", op.verb());
        let question = if !by_filter {
            format!("{} the selected dead jobs:", op.verb())
        } else if dq.is_empty() {
            format!("{} ALL dead jobs of queue {queue} (no filter):", op.verb())
        } else {
            format!("{} the dead jobs matching {}:", op.verb(), dq.describe())
        };
        let hidden = html! {
            input type="hidden" name="op" value=(opname);
            @if by_filter { (dq.hidden()) }
            @else { @for id in &ids { input type="hidden" name="job_id" value=(id); } }
        };
        return v.page(
            StatusCode::OK,
            result::confirm(
                &v,
                Confirm {
                    title: &title,
                    question: &question,
                    count: n,
                    more,
                    first_ids: &first,
                    action: &action,
                    hidden,
                    cancel: &action,
                },
            ),
        );
    }
    let done = if by_filter {
        let filter = match dq.filter() {
            Ok(f) => f,
            Err(e) => return v.error(StatusCode::BAD_REQUEST, &e),
        };
        let r = match op {
            Op::Replay => v.caller.replay(&queue, Vec::new(), Some(filter)).await,
            Op::Delete => v.caller.delete(&queue, Vec::new(), Some(filter)).await,
        };
        match r {
            Ok((touched, _)) => Done {
                touched: touched.len() as u64,
                skipped: 0,
                audit: vec![audit_line(
                    &v,
                    op.action(),
                    &queue,
                    &dq.describe(),
                    touched.len() as u64,
                )],
            },
            Err(s) => return v.failed(s),
        }
    } else {
        match by_ids(&v, op, &queue, &ids).await {
            Ok(d) => d,
            Err(r) => return *r,
        }
    };
    page(
        &v,
        &format!("{} dead jobs of {queue}", op.past()),
        &outcome(op, &queue, &done),
        &done.audit,
        (&action, "Back to the dead letters"),
    )
}
