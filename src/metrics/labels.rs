//! Bounded label values. A producer that invents a job name per job must not create a time
//! series per job: each queue keeps the first [`max_job_names`] names it sees as labels and
//! reports every later one as `other`.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{LazyLock, Mutex};

/// The label value for names past the cap.
pub const OTHER: &str = "other";

static MAX_JOB_NAMES: AtomicUsize = AtomicUsize::new(100);
static SEEN: LazyLock<Mutex<HashMap<String, HashSet<String>>>> = LazyLock::new(Mutex::default);

/// Sets the per-queue cap on distinct `job_name` label values (at start-up).
pub fn set_max_job_names(n: usize) {
    MAX_JOB_NAMES.store(n, Ordering::Relaxed);
}

/// The per-queue cap on distinct `job_name` label values.
pub fn max_job_names() -> usize {
    MAX_JOB_NAMES.load(Ordering::Relaxed)
}

/// The `job_name` label for `name` on `queue`: the name itself while the queue has fewer
/// than the cap, `other` after that.
pub fn job_name(queue: &str, name: &str) -> String {
    job_name_first(queue, name).0
}

/// [`job_name`], and whether this call gave the name its label (the first time the queue
/// saw it).
pub fn job_name_first(queue: &str, name: &str) -> (String, bool) {
    let Ok(mut seen) = SEEN.lock() else {
        return (OTHER.to_owned(), false);
    };
    let names = seen.entry(queue.to_owned()).or_default();
    if names.contains(name) {
        return (name.to_owned(), false);
    }
    if names.len() < max_job_names() {
        names.insert(name.to_owned());
        return (name.to_owned(), true);
    }
    (OTHER.to_owned(), false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_past_the_cap_become_other_per_queue() {
        let cap = max_job_names();
        for i in 0..cap {
            assert_eq!(job_name("labels-test-q", &format!("n{i}")), format!("n{i}"));
        }
        assert_eq!(job_name("labels-test-q", "one-too-many"), OTHER);
        assert_eq!(
            job_name("labels-test-q", "n0"),
            "n0",
            "known names keep their label"
        );
        assert_eq!(
            job_name("labels-test-other-q", "one-too-many"),
            "one-too-many"
        );
    }
}
