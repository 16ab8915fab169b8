//! Bounded label values. A producer that invents a job name per job must not create a time
//! series per job: each queue keeps the first [`max_job_names`] names it sees as labels and
//! reports every later one as `other`. Likewise a client that invents queue names must not
//! create series per queue: this replica labels the first [`max_queues`] queues it records
//! a metric for by their name and every later one as `other` (so two replicas may name
//! different queues when there are more than the cap).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{LazyLock, Mutex};

/// The label value for names past the cap.
pub const OTHER: &str = "other";

static MAX_JOB_NAMES: AtomicUsize = AtomicUsize::new(100);
static SEEN: LazyLock<Mutex<HashMap<String, HashSet<String>>>> = LazyLock::new(Mutex::default);

/// Default of the cap on distinct `queue` label values (`--metrics-max-queues`): with every
/// metric a queue can have (histograms included) a named queue renders about 5 KB of
/// `/metrics`, so the default keeps the page near 1 MB at worst.
pub const DEFAULT_MAX_QUEUES: usize = 200;

static MAX_QUEUES: AtomicUsize = AtomicUsize::new(DEFAULT_MAX_QUEUES);
static QUEUES: LazyLock<Mutex<HashSet<String>>> = LazyLock::new(Mutex::default);

/// Sets the cap on distinct `queue` label values (at start-up).
pub fn set_max_queues(n: usize) {
    MAX_QUEUES.store(n, Ordering::Relaxed);
}

/// The cap on distinct `queue` label values.
pub fn max_queues() -> usize {
    MAX_QUEUES.load(Ordering::Relaxed)
}

/// The `queue` label for `queue`: its name while fewer than the cap are named (or if it
/// already is), `other` after that.
pub fn queue(queue: &str) -> String {
    capped(&QUEUES, max_queues(), queue)
}

/// `value` if `set` holds it or has room under `cap` (then it is added), else `other`.
fn capped(set: &Mutex<HashSet<String>>, cap: usize, value: &str) -> String {
    let Ok(mut named) = set.lock() else {
        return OTHER.to_owned();
    };
    if named.contains(value) {
        return value.to_owned();
    }
    if named.len() < cap {
        named.insert(value.to_owned());
        return value.to_owned();
    }
    OTHER.to_owned()
}

/// The queues named in labels so far.
pub fn named_queues() -> Vec<String> {
    QUEUES
        .lock()
        .map(|q| q.iter().cloned().collect())
        .unwrap_or_default()
}

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
/// saw it). Queues past the queue cap share one set of names (that of `other`).
pub fn job_name_first(queue: &str, name: &str) -> (String, bool) {
    let label = self::queue(queue);
    let Ok(mut seen) = SEEN.lock() else {
        return (OTHER.to_owned(), false);
    };
    let names = seen.entry(label).or_default();
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

    #[test]
    fn queues_past_the_cap_become_other() {
        let set = Mutex::default();
        for q in ["a", "b", "c"] {
            assert_eq!(capped(&set, 3, q), q);
        }
        assert_eq!(capped(&set, 3, "d"), OTHER);
        assert_eq!(capped(&set, 3, "a"), "a", "named queues keep their label");
    }
}
