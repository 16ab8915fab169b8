//! The pages: one module each, and the layout, login and error pages they share.

pub mod dead;
pub mod job;
pub mod overview;
pub mod queue;
pub mod result;
pub mod workers;

use axum::http::StatusCode;
use axum::response::Response;
use maud::{html, Markup, DOCTYPE};

use super::assets;
use super::visitor::Visitor;

/// htmx settings: no inline indicator styles (the CSP forbids them), no eval, no scripts in
/// swapped content.
const HTMX_CONFIG: &str =
    r#"{"includeIndicatorStyles":false,"allowEval":false,"allowScriptTags":false}"#;

fn head(title: &str) -> Markup {
    html! {
        head {
            meta charset="utf-8";
            meta name="viewport" content="width=device-width, initial-scale=1";
            meta name="htmx-config" content=(HTMX_CONFIG);
            title { (title) " · jobwire" }
            link rel="stylesheet" href=(assets::url(assets::STYLE));
            script src=(assets::url(assets::HTMX)) defer {}
        }
    }
}

fn nav() -> Markup {
    html! {
        nav {
            a.brand href="/ui/" { "jobwire" }
            a href="/ui/" { "Queues" }
            a href="/ui/workers" { "Workers" }
        }
    }
}

/// A whole page for `v`: the head, the nav with the principal (and logout), the banners
/// (no auth file; read-only), then `body`.
pub fn layout(v: &Visitor, title: &str, body: Markup) -> Markup {
    let ui = v.ui();
    html! {
        (DOCTYPE)
        html lang="en" {
            (head(title))
            body {
                header {
                    (nav())
                    span.who {
                        "Signed in as "
                        strong #whoami { (v.principal.name) }
                    }
                    @if ui.auth_on() {
                        form.logout method="post" action="/ui/logout" {
                            input type="hidden" name="csrf" value=(v.csrf());
                            button type="submit" { "Log out" }
                        }
                    }
                }
                @if !ui.auth_on() {
                    p #auth-off .banner.warn {
                        "Authentication is off (no --auth-file): every visitor is anonymous "
                        "and may do everything."
                    }
                }
                @if ui.read_only() {
                    p #read-only .banner {
                        "Read-only dashboard (--ui-read-only): actions are hidden and refused."
                    }
                }
                main { (body) }
            }
        }
    }
}

/// The login page, with `error` shown when a token was refused.
pub fn login(error: Option<&str>) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            (head("Log in"))
            body {
                header { (nav()) }
                main.narrow {
                    h1 { "Log in to jobwire" }
                    @if let Some(e) = error {
                        p.error role="alert" { (e) }
                    }
                    form #login method="post" action="/ui/login" {
                        label for="token" { "Bearer token" }
                        input #token type="password" name="token" autocomplete="off"
                            required placeholder="jw_<id>_<secret>";
                        button type="submit" { "Log in" }
                    }
                    p.hint {
                        "A token of the server's auth file (" code { "jobwire token new" }
                        "). It stays on the server: the browser only holds a session cookie. "
                        "A viewer's session shows; an admin's may act."
                    }
                }
            }
        }
    }
}

/// An error page inside the layout.
pub fn error(v: &Visitor, code: StatusCode, message: &str) -> Markup {
    layout(
        v,
        code.canonical_reason().unwrap_or("Error"),
        html! {
            h1 { (code.as_u16()) " " (code.canonical_reason().unwrap_or("")) }
            p.error role="alert" { (message) }
            p { a href="/ui/" { "Back to the queues" } }
        },
    )
}

/// An error page without a session (no principal, no forms).
pub fn bare_error(code: StatusCode, message: &str) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            (head(code.canonical_reason().unwrap_or("Error")))
            body {
                header { (nav()) }
                main {
                    h1 { (code.as_u16()) " " (code.canonical_reason().unwrap_or("")) }
                    p.error role="alert" { (message) }
                    p { a href="/ui/login" { "Log in" } }
                }
            }
        }
    }
}

/// `Some(404 page)` when `queue` is not a known queue (ListQueues does not list it for the
/// visitor): a typo'd URL gets "queue not found" and a link to the overview, not an empty
/// queue with actions. `Some(error page)` when ListQueues fails. ListQueues reads the stats
/// of every queue, so the pages ask it only when their own call looked like an unknown queue
/// (no jobs at all, no dead job, or the job not found).
pub async fn unknown_queue(v: &Visitor, queue: &str) -> Option<Response> {
    match v.caller.list_queues().await {
        Ok(qs) if qs.iter().any(|q| q.queue == queue) => None,
        Ok(_) => Some(v.error(
            StatusCode::NOT_FOUND,
            &format!("queue not found: {queue:?} (no queue of that name that you may view)"),
        )),
        Err(s) => Some(v.failed(s)),
    }
}
