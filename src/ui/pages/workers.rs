//! `GET /ui/workers`: every replica's worker streams (QueueService.ListWorkers): replica,
//! stream id, worker id, queues, credits, held leases, last heard.

use axum::http::StatusCode;
use axum::response::Response;
use maud::html;

use super::layout;
use crate::ui::visitor::Visitor;

/// The workers page.
pub async fn get(v: &Visitor) -> Response {
    let body = html! {
        h1 { "Workers" }
        table #workers {
            thead { tr {
                th { "Replica" } th { "Stream" } th { "Worker id" } th { "Queues" }
                th.num { "Credits" } th.num { "Held leases" } th { "Connected since" }
                th { "Last heard" }
            } }
            tbody {}
        }
        p.empty { "Listing workers needs QueueService.ListWorkers (not on this server yet)." }
    };
    v.page(StatusCode::OK, layout(v, "Workers", body))
}
