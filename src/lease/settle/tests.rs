//! The lane logic against a fake store call that records each call and can be held open.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::*;

struct State {
    calls: Mutex<Vec<Vec<u32>>>,
    /// One permit per call allowed to finish.
    permits: Semaphore,
    fail: AtomicBool,
}

struct FakeOp(Arc<State>);

impl SettleOp for FakeOp {
    type Item = u32;
    type Out = u32;
    async fn call(
        &self,
        _queue: &QueueName,
        items: &[u32],
    ) -> Result<Vec<Settle<u32>>, StoreError> {
        if let Ok(mut c) = self.0.calls.lock() {
            c.push(items.to_vec());
        }
        if let Ok(p) = self.0.permits.acquire().await {
            p.forget();
        }
        if self.0.fail.load(Ordering::Relaxed) {
            return Err(StoreError::Decode("boom".into()));
        }
        Ok(items.iter().map(|i| Settle::Done(i * 10)).collect())
    }
}

fn coalescer(max: usize) -> (Arc<Coalescer<FakeOp>>, Arc<State>) {
    let state = Arc::new(State {
        calls: Mutex::default(),
        permits: Semaphore::new(0),
        fail: AtomicBool::new(false),
    });
    let c = Coalescer::new(
        FakeOp(state.clone()),
        max,
        TaskTracker::new(),
        CancellationToken::new(),
    );
    (Arc::new(c), state)
}

fn calls(s: &State) -> Vec<Vec<u32>> {
    s.calls.lock().map(|c| c.clone()).unwrap_or_default()
}

fn queue() -> QueueName {
    QueueName::parse("q").expect("queue name")
}

/// Submits from a task of its own, as a stream reader would.
fn submit(c: &Arc<Coalescer<FakeOp>>, items: Vec<u32>) -> tokio::task::JoinHandle<Reply> {
    let c = c.clone();
    tokio::spawn(async move { c.submit(&queue(), items).await })
}

/// Lets every spawned task run up to its next wait (single-threaded test runtime).
async fn settle_tasks() {
    for _ in 0..50 {
        tokio::task::yield_now().await;
    }
}

type Reply = Result<SettleReply<u32, u32>, Vec<u32>>;

fn done(reply: Reply) -> (Vec<u32>, Vec<u32>) {
    let (items, results) = reply.expect("a reply");
    let results = results
        .expect("the call succeeded")
        .into_iter()
        .map(|r| match r {
            Settle::Done(v) => v,
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    (items, results)
}

#[tokio::test]
async fn a_lone_submission_is_applied_at_once_in_its_own_call() {
    let (c, state) = coalescer(1000);
    state.permits.add_permits(1);
    let (items, results) = done(c.submit(&queue(), vec![7, 8]).await);
    assert_eq!(items, [7, 8]);
    assert_eq!(results, [70, 80]);
    assert_eq!(calls(&state), [vec![7, 8]]);
}

#[tokio::test]
async fn submissions_queued_behind_a_call_in_flight_share_the_next_call() {
    let (c, state) = coalescer(1000);
    let first = submit(&c, vec![1]);
    settle_tasks().await;
    assert_eq!(calls(&state), [vec![1]], "the first call is in flight");
    let later: Vec<_> = [vec![2], vec![3, 4], vec![5]]
        .into_iter()
        .map(|items| submit(&c, items))
        .collect();
    settle_tasks().await;
    assert_eq!(
        calls(&state).len(),
        1,
        "nothing else runs while it is in flight"
    );
    state.permits.add_permits(2);
    assert_eq!(done(first.await.expect("join")), (vec![1], vec![10]));
    let mut got = Vec::new();
    for h in later {
        got.push(done(h.await.expect("join")));
    }
    assert_eq!(
        got,
        [
            (vec![2], vec![20]),
            (vec![3, 4], vec![30, 40]),
            (vec![5], vec![50])
        ],
        "each submitter gets its own items and results"
    );
    assert_eq!(
        calls(&state),
        [vec![1], vec![2, 3, 4, 5]],
        "one coalesced call"
    );
}

#[tokio::test]
async fn a_call_holds_at_most_max_items_and_never_splits_a_submission() {
    let (c, state) = coalescer(3);
    let first = submit(&c, vec![1]);
    settle_tasks().await;
    let later: Vec<_> = [vec![2, 3], vec![4, 5], vec![6]]
        .into_iter()
        .map(|items| submit(&c, items))
        .collect();
    settle_tasks().await;
    state.permits.add_permits(3);
    done(first.await.expect("join"));
    for h in later {
        done(h.await.expect("join"));
    }
    assert_eq!(calls(&state), [vec![1], vec![2, 3], vec![4, 5, 6]]);
}

#[tokio::test]
async fn a_failed_call_gives_its_error_to_every_submission_it_carried() {
    let (c, state) = coalescer(1000);
    state.fail.store(true, Ordering::Relaxed);
    let first = submit(&c, vec![1]);
    settle_tasks().await;
    let a = submit(&c, vec![2, 3]);
    let b = submit(&c, vec![4]);
    settle_tasks().await;
    state.permits.add_permits(2);
    for (h, want) in [(first, vec![1]), (a, vec![2, 3]), (b, vec![4])] {
        let (items, result) = h.await.expect("join").expect("reply");
        assert_eq!(items, want, "the items come back");
        assert!(result.is_err(), "the call's error");
    }
    assert_eq!(calls(&state), [vec![1], vec![2, 3, 4]]);
}

fn lane_count(c: &Coalescer<FakeOp>) -> usize {
    c.lanes.lock().map(|l| l.len()).unwrap_or(usize::MAX)
}

#[tokio::test(start_paused = true)]
async fn an_idle_lane_ends_and_the_next_submission_gets_a_fresh_one() {
    let (c, state) = coalescer(1000);
    state.permits.add_permits(2);
    done(c.submit(&queue(), vec![1]).await);
    assert_eq!(lane_count(&c), 1);
    // A queue no one settles on any more costs no task and no map entry.
    tokio::time::sleep(std::time::Duration::from_secs(120)).await;
    settle_tasks().await;
    assert_eq!(lane_count(&c), 0, "the idle lane ended");
    let (items, results) = done(c.submit(&queue(), vec![2]).await);
    assert_eq!((items, results), (vec![2], vec![20]));
    assert_eq!(calls(&state), [vec![1], vec![2]]);
}
