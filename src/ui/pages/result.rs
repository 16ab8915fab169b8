//! The pages around an action: the confirmation of a bulk action (the count and the first
//! ids, then a `confirm` button) and the result (what was done and the audit lines the
//! server recorded for it).

use maud::{html, Markup};

use super::layout;
use crate::ui::visitor::Visitor;

/// Ids shown on a confirmation page.
pub const FIRST_IDS: usize = 20;

/// What a confirmation page shows and posts back.
pub struct Confirm<'a> {
    /// The page's title, e.g. "Replay dead jobs of q".
    pub title: &'a str,
    /// The question, e.g. "Replay these dead jobs?".
    pub question: &'a str,
    /// Jobs the action would touch now; `more` when counting stopped at a cap.
    pub count: u64,
    /// Counting stopped at a cap: there are at least `count`.
    pub more: bool,
    /// The first ids.
    pub first_ids: &'a [String],
    /// Where the confirmation posts.
    pub action: &'a str,
    /// The hidden fields that repeat the request (op, ids or filter).
    pub hidden: Markup,
    /// Where "cancel" goes.
    pub cancel: &'a str,
}

/// The confirmation page of a bulk action.
pub fn confirm(v: &Visitor, c: Confirm<'_>) -> Markup {
    let body = html! {
        h1 { (c.title) }
        p.lead {
            (c.question) " "
            strong #confirm-count data-count=(c.count) { (c.count) @if c.more { "+" } }
            " job" @if c.count != 1 { "s" } "."
        }
        @if !c.first_ids.is_empty() {
            p { "First ids:" }
            ul #confirm-ids .ids {
                @for id in c.first_ids { li { code { (id) } } }
            }
            @if (c.first_ids.len() as u64) < c.count { p.muted { "…and more." } }
        }
        form #confirm method="post" action=(c.action) {
            input type="hidden" name="csrf" value=(v.csrf());
            (c.hidden)
            input type="hidden" name="confirmed" value="1";
            button.danger type="submit" data-action="confirm" { "Confirm" }
            " "
            a href=(c.cancel) { "Cancel" }
        }
        p.hint { "The count may change before you confirm: the action applies to what "
            "matches then, and the result page says how many it touched." }
    };
    layout(v, c.title, body)
}

/// The result page: `result` (e.g. "Replayed 3 jobs") and the audit lines recorded.
pub fn result(
    v: &Visitor,
    title: &str,
    result: &str,
    audit: &[String],
    back: (&str, &str),
) -> Markup {
    let body = html! {
        h1 { (title) }
        p #result .ok role="status" { (result) }
        @if !audit.is_empty() {
            h2 { "Audit" }
            p.muted { "The server recorded (log target jobwire::audit):" }
            ul #audit {
                @for line in audit { li.audit-line { code { (line) } } }
            }
        }
        p { a href=(back.0) { (back.1) } }
    };
    layout(v, title, body)
}
