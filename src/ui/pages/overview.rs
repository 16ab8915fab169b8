//! `GET /ui/`: every queue the principal may see (ListQueues) with its counts, oldest
//! waiting age, worker streams (ListWorkers, every replica), paused flag, and sparklines of completed jobs and failed attempts
//! from this replica's in-process history. The table body refreshes itself every 5 s with
//! htmx (the page works without it).

use std::collections::HashMap;

use axum::http::StatusCode;
use axum::response::Response;
use maud::{html, Markup};

use super::layout;
use crate::metrics::history;
use crate::pb;
use crate::ui::components::{dead_url, oldest_waiting, queue_url, scroll, sparkline};
use crate::ui::visitor::Visitor;

/// The overview page.
pub async fn get(v: &Visitor) -> Response {
    let queues = match v.caller.list_queues().await {
        Ok(q) => q,
        Err(s) => return v.failed(s),
    };
    // Worker streams per queue across every replica (ListWorkers); this replica's count
    // (GetQueueStats) when that is refused or fails.
    let workers: Option<HashMap<String, usize>> = v.caller.list_workers().await.ok().map(|r| {
        let mut per = HashMap::new();
        for w in r.streams {
            for q in w.queues {
                *per.entry(q).or_insert(0) += 1;
            }
        }
        per
    });
    let body = html! {
        h1 { "Queues" }
        @if queues.is_empty() {
            p.empty { "No queues yet (a queue appears with its first job)." }
        }
        (scroll(html! { table #queues {
            thead {
                tr {
                    th { "Queue" }
                    th.num { "Waiting" }
                    th.num { "Delayed" }
                    th.num { "Active" }
                    th.num { "Dead" }
                    th { "Oldest waiting" }
                    th.num { "Workers" }
                    th { "Paused" }
                    th { "Completed / 10 min" }
                    th { "Failed / 10 min" }
                }
            }
            (rows(&queues, workers.as_ref()))
        } }))
        p.hint {
            "Counts are read from Redis, workers from every replica; the sparklines are "
            "this replica's (10 s buckets)."
        }
    };
    v.page(StatusCode::OK, layout(v, "Queues", body))
}

fn rows(queues: &[pb::QueueStats], workers: Option<&HashMap<String, usize>>) -> Markup {
    html! {
        tbody #queues-body hx-get="/ui/" hx-trigger="every 5s" hx-select="#queues-body"
            hx-swap="outerHTML" {
            @for q in queues {
                @let series = history::series(&q.queue);
                @let done: Vec<u32> = series.iter().map(|c| c.0).collect();
                @let failed: Vec<u32> = series.iter().map(|c| c.1).collect();
                tr data-queue=(q.queue) {
                    td { a href=(queue_url(&q.queue)) { (q.queue) } }
                    td.num data-col="waiting" { (q.waiting) }
                    td.num data-col="delayed" { (q.delayed) }
                    td.num data-col="active" { (q.active) }
                    td.num data-col="dead" {
                        a href=(dead_url(&q.queue)) { (q.dead) }
                    }
                    td data-col="oldest_waiting" {
                        (oldest_waiting(q.waiting, q.oldest_waiting_age.as_ref()))
                    }
                    td.num data-col="workers" {
                        @match workers {
                            Some(w) => (w.get(&q.queue).copied().unwrap_or(0)),
                            None => (q.workers_connected),
                        }
                    }
                    td data-col="paused" {
                        @if q.paused { span.badge.paused { "paused" } } @else { "no" }
                    }
                    td data-col="throughput" { (sparkline(&done, "ok", "completed")) }
                    td data-col="failures" { (sparkline(&failed, "bad", "failed attempts")) }
                }
            }
        }
    }
}
