//! Is a queue known? The server answers an unknown queue's reads with zeros and an empty
//! list, and registers a queue on its first pause or config write (public API, on purpose),
//! so a typo would look like a healthy empty queue. Queue-scoped commands ask ListQueues
//! first: a queue is known when it is registered (a job was enqueued, or it was paused or
//! configured, and it was not deleted since) and the caller may view it.

use jobwire_client::Client;

use super::CliError;

/// Ok when `queue` is in ListQueues; [`CliError::NotFound`] (exit 3) naming it, with the
/// closest known names, when it is not. When the caller may list no queue at all (ListQueues
/// answers PERMISSION_DENIED, e.g. a producer token) the check is skipped and the command's
/// own call decides.
pub async fn require_queue(c: &Client, queue: &str) -> Result<(), CliError> {
    let queues = match c.list_queues().await {
        Ok(q) => q,
        Err(e) if e.code() == Some(tonic::Code::PermissionDenied) => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    if queues.iter().any(|q| q.queue == queue) {
        return Ok(());
    }
    let names: Vec<&str> = queues.iter().map(|q| q.queue.as_str()).collect();
    Err(CliError::NotFound(not_found_message(queue, &names)))
}

/// `queue "x" not found`, with `(did you mean "y"?)` when a known name is close.
fn not_found_message(queue: &str, known: &[&str]) -> String {
    let mut close: Vec<(f64, &str)> = known
        .iter()
        .map(|k| (strsim::jaro_winkler(queue, k), *k))
        .filter(|(score, _)| *score >= 0.8)
        .collect();
    close.sort_by(|a, b| b.0.total_cmp(&a.0));
    let mut s = format!("queue {queue:?} not found");
    if !close.is_empty() {
        let names: Vec<String> = close
            .iter()
            .take(3)
            .map(|(_, k)| format!("{k:?}"))
            .collect();
        s.push_str(&format!(" (did you mean {}?)", names.join(" or ")));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::not_found_message;

    #[test]
    fn names_the_queue_and_the_close_known_names() {
        assert_eq!(
            not_found_message("emials", &["emails", "reports"]),
            r#"queue "emials" not found (did you mean "emails"?)"#
        );
        assert_eq!(
            not_found_message("nosuchq", &["emails", "reports"]),
            r#"queue "nosuchq" not found"#
        );
    }
}
