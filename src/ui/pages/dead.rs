//! `GET /ui/queues/{queue}/dead`: the dead-letter queue (ListDeadLetters), filtered by job
//! name, error type, dead reason, message prefix and death time, paged; checkboxes and the
//! bulk actions (replay or delete the selected jobs, or every job the filter matches) for
//! those who may.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use maud::{html, Markup};

use super::layout;
use crate::auth::Rpc;
use crate::pb;
use crate::ui::components::{
    dead_url, job_url, msg_cell, parse_time, query, queue_url, reason_name, relative_time, scroll,
    ts_el, REASONS,
};
use crate::ui::visitor::{Form, Visitor};

/// Dead jobs per page.
const PAGE_SIZE: i32 = 50;

/// The filter fields of the dead-letter page, as typed (query string or form).
#[derive(Clone, Debug, Default)]
pub struct DeadQuery {
    /// Exact job name.
    pub job_name: String,
    /// Exact error type of the last attempt.
    pub error_type: String,
    /// Dead reason's short name (`no_retry`, ...), "" for any.
    pub reason: String,
    /// Prefix of the last attempt's message.
    pub message_prefix: String,
    /// Died at or after (RFC 3339, datetime-local, or an age: `2h` is two hours ago).
    pub dead_after: String,
    /// Died before.
    pub dead_before: String,
}

impl DeadQuery {
    /// The fields of `f`.
    pub fn from_form(f: &Form) -> DeadQuery {
        DeadQuery {
            job_name: f.str("job_name").to_owned(),
            error_type: f.str("error_type").to_owned(),
            reason: f.str("reason").to_owned(),
            message_prefix: f.get("message_prefix").unwrap_or("").to_owned(),
            dead_after: f.str("dead_after").to_owned(),
            dead_before: f.str("dead_before").to_owned(),
        }
    }

    /// The fields as (name, value) pairs.
    pub fn pairs(&self) -> [(&'static str, &str); 6] {
        [
            ("job_name", &self.job_name),
            ("error_type", &self.error_type),
            ("reason", &self.reason),
            ("message_prefix", &self.message_prefix),
            ("dead_after", &self.dead_after),
            ("dead_before", &self.dead_before),
        ]
    }

    /// Is no field set (the filter matches every dead job)?
    pub fn is_empty(&self) -> bool {
        self.pairs().iter().all(|(_, v)| v.is_empty())
    }

    /// The RPC's filter; `Err` names the bad field.
    pub fn filter(&self) -> Result<pb::DeadLetterFilter, String> {
        let reason = if self.reason.is_empty() {
            pb::DeadReason::Unspecified
        } else {
            REASONS
                .iter()
                .find(|(n, _)| *n == self.reason)
                .map(|(_, r)| *r)
                .ok_or_else(|| {
                    format!(
                        "reason must be one of no_retry, attempts_exhausted, lease_expired, \
                         timed_out, got {:?}",
                        self.reason
                    )
                })?
        };
        Ok(pb::DeadLetterFilter {
            job_name: self.job_name.clone(),
            error_type: self.error_type.clone(),
            reason: reason as i32,
            error_message_prefix: self.message_prefix.clone(),
            dead_after: parse_time("dead_after", &self.dead_after)?,
            dead_before: parse_time("dead_before", &self.dead_before)?,
        })
    }

    /// The query with each age (`dead_after=2h`) replaced by the UTC time it names now;
    /// `None` when no field is an age. A bad age is left for [`DeadQuery::errors`].
    pub fn resolved(&self) -> Option<DeadQuery> {
        let mut out = self.clone();
        let mut changed = false;
        for field in [&mut out.dead_after, &mut out.dead_before] {
            if let Some(Ok(t)) = relative_time(field) {
                *field = humantime::format_rfc3339_seconds(t).to_string();
                changed = true;
            }
        }
        changed.then_some(out)
    }

    /// What is wrong with each bad field, by the field's name (empty when the filter is good).
    pub fn errors(&self) -> Vec<(&'static str, String)> {
        let mut errs = Vec::new();
        for (field, value) in [
            ("dead_after", &self.dead_after),
            ("dead_before", &self.dead_before),
        ] {
            if let Err(e) = parse_time(field, value) {
                errs.push((field, e));
            }
        }
        if !self.reason.is_empty() && !REASONS.iter().any(|(n, _)| *n == self.reason) {
            let names: Vec<&str> = REASONS.iter().map(|(n, _)| *n).collect();
            let e = format!(
                "reason must be one of {}, got {:?}",
                names.join(", "),
                self.reason
            );
            errs.push(("reason", e));
        }
        errs
    }

    /// How the filter reads in a result page: the fields set, or "every dead job".
    pub fn describe(&self) -> String {
        if self.is_empty() {
            return "every dead job".into();
        }
        self.pairs()
            .iter()
            .filter(|(_, v)| !v.is_empty())
            .map(|(k, v)| format!("{k}={v:?}"))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// Hidden inputs carrying the filter in a form.
    pub fn hidden(&self) -> Markup {
        html! {
            @for (k, val) in self.pairs() {
                input type="hidden" name=(k) value=(val);
            }
        }
    }
}

/// The dead-letter page.
pub async fn get(v: &Visitor, queue: &str, q: &Form) -> Response {
    let dq = DeadQuery::from_form(q);
    // An age (dead_after=2h) becomes the time it names, once, so that the next pages, the
    // confirmation and the action all see the same window (a bookmark keeps the age).
    if let Some(resolved) = dq.resolved() {
        let to = format!("{}?{}", dead_url(queue), query(&resolved.pairs()));
        return Redirect::to(&to).into_response();
    }
    let filter = match dq.filter() {
        Ok(f) => f,
        Err(_) => return bad_filter(v, queue, &dq),
    };
    let page = q.str("page");
    let resp = match v
        .caller
        .list_dead(queue, Some(filter), page, PAGE_SIZE)
        .await
    {
        Ok(r) => r,
        Err(s) => return v.failed(s),
    };
    // No dead job on the first page may mean a typo'd queue name: only then ask ListQueues.
    if resp.dead_letters.is_empty() && page.is_empty() {
        if let Some(r) = super::unknown_queue(v, queue).await {
            return r;
        }
    }
    let can_replay = v.can(Rpc::ReplayDeadLetters, queue);
    let can_delete = v.can(Rpc::DeleteDeadLetters, queue);
    let act = can_replay || can_delete;
    let mut next = dq.pairs().to_vec();
    next.push(("page", &resp.next_page_token));
    let body = html! {
        p.crumbs { a href=(queue_url(queue)) { (queue) } " / dead letters" }
        h1 { "Dead letters of " (queue) }
        (filter_form(queue, &dq))
        form #dlq-actions method="post" action=(dead_url(queue)) {
            input type="hidden" name="csrf" value=(v.csrf());
            (dq.hidden())
            (scroll(html! { table #dead {
                thead { tr {
                    th { span.sr { "Select" } }
                    th { "Job id" } th { "Name" } th { "Reason" } th { "Error type" }
                    th { "Last message" } th { "Died at" } th.num { "Attempts" }
                } }
                tbody {
                    @for j in &resp.dead_letters {
                        @let last = j.errors.last();
                        tr data-job-id=(j.job_id) {
                            td { input type="checkbox" name="job_id" value=(j.job_id)
                                disabled[!act] aria-label={ "select " (j.job_id) }; }
                            td { a href=(job_url(queue, &j.job_id)) { code { (j.job_id) } } }
                            td { (j.name) }
                            td { (reason_name(j.dead_reason)) }
                            td { code { (last.map(|e| e.error_type.as_str()).unwrap_or("")) } }
                            (msg_cell(last.map(|e| e.message.as_str()).unwrap_or("")))
                            td { (ts_el(j.finish_time.as_ref())) }
                            td.num { (j.attempts_made) }
                        }
                    }
                }
            } }))
            @if resp.dead_letters.is_empty() {
                p.empty { "No dead jobs match." }
            }
            @if act {
                div.actions {
                    @if can_replay {
                        button type="submit" name="op" value="replay-selected"
                            data-action="replay-selected" { "Replay selected" }
                        button type="submit" name="op" value="replay-filter"
                            data-action="replay-filter" { "Replay all matching…" }
                    }
                    @if can_delete {
                        button.danger type="submit" name="op" value="delete-selected"
                            data-action="delete-selected" { "Delete selected" }
                        button.danger type="submit" name="op" value="delete-filter"
                            data-action="delete-filter" { "Delete all matching…" }
                    }
                }
                p.hint { "Each action shows the count and asks to confirm first." }
            }
        }
        nav.pager {
            @if !page.is_empty() {
                a.first-page href={ (dead_url(queue)) "?" (query(&dq.pairs())) } { "« First page" }
            }
            @if !resp.next_page_token.is_empty() {
                a.next-page href={ (dead_url(queue)) "?" (query(&next)) } { "Next page »" }
            }
        }
    };
    v.page(
        StatusCode::OK,
        layout(v, &format!("Dead letters of {queue}"), body),
    )
}

/// The form again, as typed, with what is wrong next to each bad field (400), and no list.
fn bad_filter(v: &Visitor, queue: &str, dq: &DeadQuery) -> Response {
    let errs = dq.errors();
    let body = html! {
        p.crumbs { a href=(queue_url(queue)) { (queue) } " / dead letters" }
        h1 { "Dead letters of " (queue) }
        (filter_form_with(queue, dq, &errs))
        p.error role="alert" { "The filter has a bad value: fix it to list dead jobs." }
    };
    v.page(
        StatusCode::BAD_REQUEST,
        layout(v, &format!("Dead letters of {queue}"), body),
    )
}

fn filter_form(queue: &str, dq: &DeadQuery) -> Markup {
    filter_form_with(queue, dq, &[])
}

/// The error of `field` after its input, if any.
fn field_error(errs: &[(&str, String)], field: &str) -> Markup {
    html! {
        @for (f, e) in errs.iter().filter(|(f, _)| *f == field) {
            span.field-error id={ (f) "-error" } role="alert" { (e) }
        }
    }
}

fn filter_form_with(queue: &str, dq: &DeadQuery, errs: &[(&str, String)]) -> Markup {
    let bad = |field: &str| errs.iter().any(|(f, _)| *f == field);
    html! {
        form #dlq-filter .filters method="get" action=(dead_url(queue)) {
            label { "Job name " input type="text" name="job_name" value=(dq.job_name); }
            label { "Error type " input type="text" name="error_type" value=(dq.error_type); }
            label { "Reason "
                select name="reason" aria-invalid=[bad("reason").then_some("true")] {
                    option value="" selected[dq.reason.is_empty()] { "any" }
                    @for (n, _) in REASONS {
                        option value=(n) selected[dq.reason == n] { (n) }
                    }
                }
                (field_error(errs, "reason"))
            }
            label { "Message starts with "
                input type="text" name="message_prefix" value=(dq.message_prefix); }
            label { "Died after (UTC time or age) "
                input type="text" name="dead_after" value=(dq.dead_after)
                    placeholder="2h or 2026-12-02T03:00:00Z"
                    aria-invalid=[bad("dead_after").then_some("true")];
                (field_error(errs, "dead_after")) }
            label { "Died before (UTC time or age) "
                input type="text" name="dead_before" value=(dq.dead_before)
                    placeholder="30m or 2026-12-02T04:00:00Z"
                    aria-invalid=[bad("dead_before").then_some("true")];
                (field_error(errs, "dead_before")) }
            button type="submit" { "Filter" }
            a href=(dead_url(queue)) { "Clear" }
        }
    }
}
