//! Bulk replay and delete of dead jobs: select, show the count, confirm, act in chunks.
//!
//! A filter is resolved to ids first (ListDeadLetters paged with the filter), so the count
//! the operator confirms is the set acted on: a job that dies after the listing is not
//! swept up unseen. The ids then go to ReplayDeadLetters / DeleteDeadLetters in chunks of
//! at most [`CHUNK`] (the RPC's limit), with a progress bar on stderr when stdout is a
//! terminal. An id not dead by then (or never a job of the queue) is reported as skipped,
//! never as an error; the RPC does not say which of the two.

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use jobwire_client::{pb, Client};
use serde::Serialize;

use super::global::Format;
use super::output::print;
use super::{prompt, CliError};

/// Ids per Replay/Delete call (the RPC takes up to 1000).
pub const CHUNK: usize = 1000;
/// Ids printed by `--dry-run`.
pub const DRY_RUN_IDS: usize = 10;

/// What to do with the selected dead jobs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// ReplayDeadLetters.
    Replay,
    /// DeleteDeadLetters.
    Delete,
}

impl Action {
    /// `replay` / `delete`.
    pub fn verb(self) -> &'static str {
        match self {
            Action::Replay => "replay",
            Action::Delete => "delete",
        }
    }
}

/// Which dead jobs: these ids, else every one the filter matches (none: all).
#[derive(Debug)]
pub struct Selection {
    /// The queue.
    pub queue: String,
    /// Ids given on the command line.
    pub job_ids: Vec<String>,
    /// The filter, when no ids are given.
    pub filter: Option<pb::DeadLetterFilter>,
}

/// `--dry-run` as JSON.
#[derive(Serialize)]
struct DryRun {
    queue: String,
    /// `replay` or `delete`.
    action: &'static str,
    dry_run: bool,
    /// How many dead jobs the action would take.
    count: usize,
    /// The first of them (at most 10).
    first_job_ids: Vec<String>,
    /// Ids given on the command line that name a job of the queue that is not dead (the
    /// action would skip them).
    not_dead_job_ids: Vec<String>,
    /// Ids given on the command line that name no job of the queue (skipped too).
    not_found_job_ids: Vec<String>,
}

/// The outcome as JSON: `{queue, replayed, skipped, replayed_job_ids, skipped_job_ids}` or
/// the same with `deleted`.
#[derive(Serialize)]
#[serde(untagged)]
enum Done {
    Replayed {
        queue: String,
        replayed: usize,
        skipped: usize,
        replayed_job_ids: Vec<String>,
        skipped_job_ids: Vec<String>,
    },
    Deleted {
        queue: String,
        deleted: usize,
        skipped: usize,
        deleted_job_ids: Vec<String>,
        skipped_job_ids: Vec<String>,
    },
}

/// Runs a bulk replay or delete (see the module doc).
pub async fn run(
    c: &Client,
    sel: Selection,
    action: Action,
    dry_run: bool,
    yes: bool,
    out: Format,
) -> Result<(), CliError> {
    let queue = sel.queue.clone();
    let by_id = !sel.job_ids.is_empty();
    let mut ids = if sel.job_ids.is_empty() {
        select(c, &sel).await?
    } else {
        let mut seen = std::collections::HashSet::new();
        sel.job_ids
            .into_iter()
            .filter(|id| seen.insert(id.clone()))
            .collect()
    };
    if dry_run {
        // Given ids are checked one by one, so the count is what the action would do.
        let (mut not_dead, mut not_found) = (Vec::new(), Vec::new());
        if by_id {
            let mut dead = Vec::new();
            for id in ids {
                match c.get_dead_letter(&queue, &id).await {
                    Ok(_) => dead.push(id),
                    Err(e) if e.code() == Some(tonic::Code::NotFound) => {
                        // Not dead: is it there at all?
                        match c.get_job(&queue, &id).await {
                            Ok(_) => not_dead.push(id),
                            Err(e) if e.code() == Some(tonic::Code::NotFound) => not_found.push(id),
                            Err(e) => return Err(e.into()),
                        }
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            ids = dead;
        }
        let what = if ids.len() == 1 {
            "dead job"
        } else {
            "dead jobs"
        };
        let d = DryRun {
            queue: queue.clone(),
            action: action.verb(),
            dry_run: true,
            count: ids.len(),
            first_job_ids: ids.iter().take(DRY_RUN_IDS).cloned().collect(),
            not_dead_job_ids: not_dead,
            not_found_job_ids: not_found,
        };
        return print(out, &d, |d| {
            let mut s = format!(
                "Would {} {} {what} of queue {} (dry run: nothing changed).\n",
                d.action, d.count, d.queue
            );
            if !d.first_job_ids.is_empty() {
                let more = if d.count > d.first_job_ids.len() {
                    ", …"
                } else {
                    ""
                };
                s.push_str(&format!("First: {}{more}\n", d.first_job_ids.join(", ")));
            }
            if !d.not_dead_job_ids.is_empty() {
                s.push_str(&format!(
                    "Not dead (would be skipped): {}\n",
                    d.not_dead_job_ids.join(", ")
                ));
            }
            if !d.not_found_job_ids.is_empty() {
                s.push_str(&format!(
                    "Not found (would be skipped): {}\n",
                    d.not_found_job_ids.join(", ")
                ));
            }
            s
        });
    }
    let what = if ids.len() == 1 {
        "dead job"
    } else {
        "dead jobs"
    };
    if ids.is_empty() {
        // Nothing matches: no prompt, no progress bar, no calls.
        let r = done(action, queue, Vec::new(), Vec::new());
        return print(out, &r, |_| {
            format!(
                "Nothing matches: no dead job of queue {} to {}.\n",
                sel.queue,
                action.verb()
            )
        });
    }
    {
        prompt::confirm(
            &format!(
                "{} {} {what} of queue {queue}?",
                match action {
                    Action::Replay => "Replay",
                    Action::Delete => "Delete",
                },
                ids.len()
            ),
            yes,
        )?;
    }
    let bar = progress(ids.len(), action);
    let (mut done_ids, mut skipped) = (Vec::new(), Vec::new());
    for chunk in ids.chunks(CHUNK) {
        let r = match action {
            Action::Replay => c
                .replay_dead_letters(&queue, chunk.to_vec(), None)
                .await
                .map(|r| (r.replayed_job_ids, r.skipped_job_ids)),
            Action::Delete => c
                .delete_dead_letters(&queue, chunk.to_vec(), None)
                .await
                .map(|r| (r.deleted_job_ids, r.skipped_job_ids)),
        };
        match r {
            Ok((d, s)) => {
                done_ids.extend(d);
                skipped.extend(s);
                bar.inc(chunk.len() as u64);
            }
            Err(e) => {
                bar.abandon();
                if !done_ids.is_empty() || !skipped.is_empty() {
                    eprintln!(
                        "jobwire: stopped after {} of {} ids ({} done, {} skipped)",
                        done_ids.len() + skipped.len(),
                        ids.len(),
                        done_ids.len(),
                        skipped.len()
                    );
                }
                return Err(e.into());
            }
        }
    }
    bar.finish_and_clear();
    let r = done(action, queue, done_ids, skipped);
    print(out, &r, |r| {
        let (verb, queue, n, skipped) = match r {
            Done::Replayed {
                queue,
                replayed,
                skipped,
                ..
            } => ("Replayed", queue, *replayed, *skipped),
            Done::Deleted {
                queue,
                deleted,
                skipped,
                ..
            } => ("Deleted", queue, *deleted, *skipped),
        };
        let what = if n == 1 { "dead job" } else { "dead jobs" };
        // The RPC skips an id that is not dead and one that never existed alike.
        format!("{verb} {n} {what} of queue {queue} ({skipped} skipped: not dead or not found).\n")
    })
}

/// The outcome of a bulk action.
fn done(action: Action, queue: String, done: Vec<String>, skipped: Vec<String>) -> Done {
    match action {
        Action::Replay => Done::Replayed {
            queue,
            replayed: done.len(),
            skipped: skipped.len(),
            replayed_job_ids: done,
            skipped_job_ids: skipped,
        },
        Action::Delete => Done::Deleted {
            queue,
            deleted: done.len(),
            skipped: skipped.len(),
            deleted_job_ids: done,
            skipped_job_ids: skipped,
        },
    }
}

/// The ids of every dead job of the selection's queue that its filter matches, oldest
/// death first.
async fn select(c: &Client, sel: &Selection) -> Result<Vec<String>, CliError> {
    let mut ids = Vec::new();
    let mut token = String::new();
    loop {
        let r = c
            .list_dead_letters(&sel.queue, CHUNK as i32, &token, sel.filter.clone())
            .await?;
        ids.extend(r.dead_letters.into_iter().map(|j| j.job_id));
        token = r.next_page_token;
        if token.is_empty() {
            return Ok(ids);
        }
    }
}

/// A progress bar on stderr, drawn only when stdout is a terminal (data and progress never
/// mix in a pipe or a file).
fn progress(len: usize, action: Action) -> ProgressBar {
    let target = if std::io::stdout().is_terminal() {
        ProgressDrawTarget::stderr()
    } else {
        ProgressDrawTarget::hidden()
    };
    let bar = ProgressBar::with_draw_target(Some(len as u64), target);
    if let Ok(style) = ProgressStyle::with_template("{msg} [{bar:40}] {pos}/{len} ({eta})") {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_message(match action {
        Action::Replay => "replaying",
        Action::Delete => "deleting",
    });
    bar
}
