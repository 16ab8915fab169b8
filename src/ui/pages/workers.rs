//! `GET /ui/workers`: every replica's worker streams (QueueService.ListWorkers): replica,
//! stream id, worker id, queues, credits, held leases, connected since, last heard; and the
//! replicas that reported, with the time of their snapshot.

use axum::http::StatusCode;
use axum::response::Response;
use maud::html;

use super::layout;
use crate::ui::components::{queue_url, scroll, ts_el};
use crate::ui::visitor::Visitor;

/// The workers page.
pub async fn get(v: &Visitor) -> Response {
    let r = match v.caller.list_workers().await {
        Ok(r) => r,
        Err(s) => return v.failed(s),
    };
    let body = html! {
        h1 { "Workers" }
        (scroll(html! { table #workers {
            thead { tr {
                th { "Replica" } th { "Stream" } th { "Worker id" } th { "Queues" }
                th.num { "Credits" } th.num { "Held leases" } th { "Connected since" }
                th { "Last heard" }
            } }
            tbody {
                @for w in &r.streams {
                    tr data-stream-id=(w.stream_id) {
                        td data-col="replica" { (w.replica_id) }
                        td data-col="stream" { code { (w.stream_id) } }
                        td data-col="worker" { (w.worker_id)
                            @if w.draining { " " span.badge.paused { "draining" } } }
                        td data-col="queues" {
                            @for (i, q) in w.queues.iter().enumerate() {
                                @if i > 0 { ", " }
                                a href=(queue_url(q)) { (q) }
                            }
                        }
                        td.num data-col="credits" { (w.credits) }
                        td.num data-col="held_leases" { (w.held_leases) }
                        td data-col="connected" { (ts_el(w.connect_time.as_ref())) }
                        td data-col="last_heard" { (ts_el(w.last_heard_time.as_ref())) }
                    }
                }
            }
        } }))
        @if r.streams.is_empty() { p.empty { "No worker streams." } }
        h2 { "Replicas" }
        (scroll(html! { table #replicas {
            thead { tr { th { "Replica" } th { "Snapshot" } } }
            tbody {
                @for rep in &r.replicas {
                    tr data-replica-id=(rep.replica_id) {
                        td { (rep.replica_id) @if rep.answered { " (this one, live)" } }
                        td { (ts_el(rep.snapshot_time.as_ref())) }
                    }
                }
            }
        } }))
    };
    v.page(StatusCode::OK, layout(v, "Workers", body))
}
