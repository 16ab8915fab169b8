//! `GET /ui/queues/{queue}?state=&name=&after=&before=&page=`: a queue's config and paused
//! state (GetQueueStats), pause/resume and purge (typed confirmation) for those who may, and
//! its jobs of one state, paged, with a search form (id; name; state; time range).

use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use maud::{html, Markup};
use tonic::Status;

use super::layout;
use crate::auth::Rpc;
use crate::pb;
use crate::ui::components::{
    dead_url, dur, job_url, msg_cell, oldest_waiting, or_none, parse_time, query, queue_url,
    reason_name, relative_time, scroll, seg, state_name, ts_el,
};
use crate::ui::visitor::{Form, Visitor};

/// Jobs per page.
const PAGE_SIZE: i32 = 50;
/// The states a queue page lists.
pub const STATES: [&str; 7] = [
    "waiting",
    "delayed",
    "active",
    "completed",
    "dead",
    "cancelled",
    "expired",
];

/// One page of jobs and the token of the next.
struct JobPage {
    jobs: Vec<pb::Job>,
    next: String,
}

/// The search of the queue page, as typed.
struct Search<'a> {
    state: &'a str,
    name: &'a str,
    after: &'a str,
    before: &'a str,
    page: &'a str,
}

/// The queue page.
pub async fn get(v: &Visitor, queue: &str, q: &Form) -> Response {
    // A search by id goes straight to the job's page.
    let id = q.str("id");
    if !id.is_empty() {
        return Redirect::to(&job_url(queue, id)).into_response();
    }
    let state = match q.str("state") {
        "" => "waiting",
        s if STATES.contains(&s) => s,
        s => {
            return v.error(
                StatusCode::BAD_REQUEST,
                &format!("state must be one of {}, got {s:?}", STATES.join(", ")),
            )
        }
    };
    let search = Search {
        state,
        name: q.str("name"),
        after: q.str("after"),
        before: q.str("before"),
        page: q.str("page"),
    };
    // An age (after=2h) becomes the UTC time it names, once, as on the dead-letter page: the
    // next pages then list one window.
    let (after, before) = (resolve(search.after), resolve(search.before));
    if after.is_some() || before.is_some() {
        let pairs = [
            ("state", state),
            ("name", search.name),
            ("after", after.as_deref().unwrap_or(search.after)),
            ("before", before.as_deref().unwrap_or(search.before)),
        ];
        return Redirect::to(&format!("{}?{}", queue_url(queue), query(&pairs))).into_response();
    }
    let stats = match v.caller.queue_stats(queue).await {
        Ok(s) => s,
        Err(s) => return v.failed(s),
    };
    // An empty queue may be a typo'd name: only then ask ListQueues (it reads every queue).
    if is_empty(&stats) {
        if let Some(r) = super::unknown_queue(v, queue).await {
            return r;
        }
    }
    let page = match list(v, queue, &search).await {
        Ok(p) => p,
        Err(Listing::Bad(e)) => return v.error(StatusCode::BAD_REQUEST, &e),
        Err(Listing::Rpc(s)) => return v.failed(s),
    };
    let body = html! {
        p.crumbs { a href="/ui/" { "Queues" } " / " (queue) }
        h1 { "Queue " (queue) }
        (state_line(v, &stats))
        (counts(&stats))
        h2 { "Jobs" }
        (search_form(queue, &search))
        (jobs_table(queue, &search, &page))
        h2 { "Config" }
        (config(stats.config.as_ref()))
        (purge_form(v, queue))
    };
    v.page(StatusCode::OK, layout(v, &format!("Queue {queue}"), body))
}

/// The UTC time an age (`30m`) names now; `None` for anything else (a time, a bad age).
fn resolve(s: &str) -> Option<String> {
    match relative_time(s) {
        Some(Ok(t)) => Some(humantime::format_rfc3339_seconds(t).to_string()),
        _ => None,
    }
}

/// No job in any state and not paused: what GetQueueStats answers for a queue that does not
/// exist, too.
fn is_empty(s: &pb::QueueStats) -> bool {
    s.waiting + s.delayed + s.active + s.completed + s.dead == 0 && !s.paused
}

enum Listing {
    Bad(String),
    Rpc(Status),
}

async fn list(v: &Visitor, queue: &str, s: &Search<'_>) -> Result<JobPage, Listing> {
    let after = parse_time("after", s.after).map_err(Listing::Bad)?;
    let before = parse_time("before", s.before).map_err(Listing::Bad)?;
    let state = match s.state {
        "waiting" => pb::JobState::Waiting,
        "delayed" => pb::JobState::Delayed,
        "active" => pb::JobState::Active,
        "completed" => pb::JobState::Completed,
        "cancelled" => pb::JobState::Cancelled,
        "expired" => pb::JobState::Expired,
        _ => pb::JobState::Dead,
    };
    let filter = pb::ListJobsFilter {
        name: s.name.to_owned(),
        after,
        before,
    };
    let r = v
        .caller
        .list_jobs(queue, state, filter, s.page, PAGE_SIZE)
        .await
        .map_err(Listing::Rpc)?;
    Ok(JobPage {
        jobs: r.jobs,
        next: r.next_page_token,
    })
}

fn state_line(v: &Visitor, s: &pb::QueueStats) -> Markup {
    let q = &s.queue;
    html! {
        div.state {
            "Leasing: "
            @if s.paused {
                strong #paused data-paused="true" .badge.paused { "paused" }
            } @else {
                strong #paused data-paused="false" { "running" }
            }
            @if s.paused && v.can(Rpc::ResumeQueue, q) {
                form.inline method="post" action={ (queue_url(q)) "/resume" } {
                    input type="hidden" name="csrf" value=(v.csrf());
                    button type="submit" data-action="resume" { "Resume" }
                }
            }
            @if !s.paused && v.can(Rpc::PauseQueue, q) {
                form.inline method="post" action={ (queue_url(q)) "/pause" } {
                    input type="hidden" name="csrf" value=(v.csrf());
                    button type="submit" data-action="pause" { "Pause" }
                }
            }
        }
    }
}

fn counts(s: &pb::QueueStats) -> Markup {
    let link = |state: &str| format!("{}?state={state}", queue_url(&s.queue));
    html! {
        ul.counts {
            li { a href=(link("waiting")) { "Waiting " strong { (s.waiting) } } }
            li { a href=(link("delayed")) { "Delayed " strong { (s.delayed) } } }
            li { a href=(link("active")) { "Active " strong { (s.active) } } }
            li { a href=(link("completed")) { "Completed " strong { (s.completed) } } }
            li { a href=(dead_url(&s.queue)) { "Dead " strong { (s.dead) } } }
            li { a href=(link("cancelled")) { "Cancelled " strong #count-cancelled { (s.cancelled) } } }
            li { a href=(link("expired")) { "Expired " strong #count-expired { (s.expired) } } }
            li { "Oldest waiting " strong #oldest-waiting {
                (oldest_waiting(s.waiting, s.oldest_waiting_age.as_ref())) } }
            li { "Workers here " strong { (s.workers_connected) } }
            @if s.groups_waiting > 0 {
                li { "Groups waiting " strong #groups-waiting { (s.groups_waiting) } }
            }
        }
    }
}

fn search_form(queue: &str, s: &Search<'_>) -> Markup {
    html! {
        form #job-search .filters method="get" action=(queue_url(queue)) {
            label { "Job id " input type="text" name="id" value=""; }
            label { "Name " input type="text" name="name" value=(s.name); }
            label { "State "
                select name="state" {
                    @for st in STATES { option value=(st) selected[s.state == st] { (st) } }
                }
            }
            label { "After (UTC time or age) " input type="text" name="after" value=(s.after)
                placeholder="2h or 2026-12-02T03:00:00Z"; }
            label { "Before (UTC time or age) " input type="text" name="before" value=(s.before)
                placeholder="30m or 2026-12-02T04:00:00Z"; }
            button type="submit" { "Search" }
        }
    }
}

fn jobs_table(queue: &str, s: &Search<'_>, page: &JobPage) -> Markup {
    let base = [
        ("state", s.state),
        ("name", s.name),
        ("after", s.after),
        ("before", s.before),
    ];
    let mut next = base.to_vec();
    next.push(("page", &page.next));
    html! {
        (scroll(html! { table #jobs data-state=(s.state) {
            thead { tr {
                th { "Job id" } th { "Name" } th { "Group" } th { "State" } th.num { "Attempts" }
                th.num { "Priority" } th { "Created" } th { "Ready" } th { "Finished" }
                th { "Last error" }
            } }
            tbody {
                @for j in &page.jobs {
                    tr data-job-id=(j.job_id) {
                        td { a href=(job_url(queue, &j.job_id)) { code { (j.job_id) } } }
                        td { (j.name) }
                        td { @if j.group_key.is_empty() { span.muted { "—" } } @else { code { (j.group_key) } } }
                        td { (state_name(j.state)) " " (reason_name(j.dead_reason)) }
                        td.num { (j.attempts_made) "/" (j.max_attempts) }
                        td.num { (j.priority) }
                        td { (ts_el(j.create_time.as_ref())) }
                        td { (ts_el(j.ready_time.as_ref())) }
                        td { (ts_el(j.finish_time.as_ref())) }
                        (msg_cell(j.errors.last().map(|e| e.message.as_str()).unwrap_or("")))
                    }
                }
            }
        } }))
        @if page.jobs.is_empty() { p.empty { "No " (s.state) " jobs match." } }
        nav.pager {
            @if !s.page.is_empty() {
                a.first-page href={ "/ui/queues/" (seg(queue)) "?" (query(&base)) } { "« First page" }
            }
            @if !page.next.is_empty() {
                a.next-page href={ "/ui/queues/" (seg(queue)) "?" (query(&next)) } { "Next page »" }
            }
        }
    }
}

fn config(c: Option<&pb::QueueConfig>) -> Markup {
    let c = c.cloned().unwrap_or_default();
    let backoff = c.default_backoff.as_ref().map(|b| {
        let kind = pb::BackoffKind::try_from(b.kind)
            .map(|k| {
                k.as_str_name()
                    .trim_start_matches("BACKOFF_KIND_")
                    .to_ascii_lowercase()
            })
            .unwrap_or_default();
        format!("{kind} {}", dur(b.delay.as_ref()))
    });
    let r = c.retention.unwrap_or_default();
    html! {
        dl #config .facts {
            dt { "Default max attempts" }
            dd { (c.default_max_attempts.map(|n| n.to_string()).unwrap_or_else(|| "server default".into())) }
            dt { "Default backoff" } dd { (backoff.unwrap_or_else(|| "none".into())) }
            dt { "Default timeout" } dd { (or_none(dur(c.default_timeout.as_ref()))) }
            dt { "Keep completed" }
            dd { (r.keep_completed.map(|n| n.to_string()).unwrap_or_else(|| "default".into()))
                 @let age = dur(r.completed_max_age.as_ref());
                 @if !age.is_empty() { ", at most " (age) } }
            dt { "Keep dead" }
            dd { (r.keep_dead.map(|n| n.to_string()).unwrap_or_else(|| "default".into()))
                 @let age = dur(r.dead_max_age.as_ref());
                 @if !age.is_empty() { ", at most " (age) } }
            dt { "Rate limit" }
            dd { @match &c.rate_limit {
                Some(rl) => { (rl.max) " starts per " (dur(rl.period.as_ref())) },
                None => "none",
            } }
            dt { "Max active" }
            dd { (c.max_active.map(|n| n.to_string()).unwrap_or_else(|| "no limit".into())) }
            dt { "Group max active" }
            dd #group-max-active {
                (c.group_max_active.map(|n| n.to_string()).unwrap_or_else(|| "no limit".into()))
            }
            dt { "Group rate limit" }
            dd #group-rate-limit { @match &c.group_rate_limit {
                Some(rl) => { (rl.max) " starts per " (dur(rl.period.as_ref())) " per group" },
                None => "none",
            } }
            dt { "Cancel grace" }
            dd #cancel-grace { (or_none(dur(c.cancel_grace.as_ref()))) }
            dt { "Expired jobs" }
            dd { @if c.dead_letter_expired { "dead-lettered" } @else { "kept as expired" } }
        }
    }
}

fn purge_form(v: &Visitor, queue: &str) -> Markup {
    html! {
        @if v.can(Rpc::PurgeQueue, queue) {
            h2 { "Purge" }
            form #purge .danger-zone method="post" action={ (queue_url(queue)) "/purge" } {
                input type="hidden" name="csrf" value=(v.csrf());
                p { "Deletes every waiting and delayed job of the queue." }
                label { input type="checkbox" name="include_completed" value="1"; " also completed jobs" }
                label { input type="checkbox" name="include_dead" value="1"; " also dead jobs" }
                label { "Type the queue name to confirm "
                    input type="text" name="confirm" autocomplete="off" required; }
                button.danger type="submit" data-action="purge" { "Purge" }
            }
        }
    }
}
