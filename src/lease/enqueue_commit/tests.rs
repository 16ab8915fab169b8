//! The lane logic against a fake store call that records each call and can be held open.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use tokio::sync::Semaphore;

use super::*;

/// An item the fake store answers with a per-item error.
const BAD: u32 = 13;
/// An item whose call panics.
const PANIC: u32 = 666;

struct State {
    calls: Mutex<Vec<Vec<u32>>>,
    /// One permit per call allowed to finish.
    permits: Semaphore,
    /// When set, a call answers for this many items and stops with an error.
    stop_after: AtomicUsize,
    stopping: AtomicBool,
}

struct FakeOp(Arc<State>);

impl CommitOp for FakeOp {
    type Item = u32;
    type Out = u32;
    fn bytes(item: &u32) -> usize {
        *item as usize
    }
    async fn call(&self, _queue: &QueueName, items: &[u32]) -> Partial<u32> {
        lock(&self.0.calls).push(items.to_vec());
        if let Ok(p) = self.0.permits.acquire().await {
            p.forget();
        }
        assert!(!items.contains(&PANIC), "a call that panics");
        let answered = if self.0.stopping.load(Ordering::Relaxed) {
            self.0.stop_after.load(Ordering::Relaxed).min(items.len())
        } else {
            items.len()
        };
        let out = items[..answered]
            .iter()
            .map(|i| match *i {
                BAD => Err(StoreError::Decode("bad record".into())),
                i => Ok(i * 10),
            })
            .collect();
        let stopped = (answered < items.len()).then(|| {
            StoreError::Unavailable(redis::RedisError::from(std::io::Error::new(
                std::io::ErrorKind::ConnectionReset,
                "down",
            )))
        });
        (out, stopped)
    }
}

fn committer(max_items: usize, max_bytes: usize) -> (Committer<FakeOp>, Arc<State>) {
    let state = Arc::new(State {
        calls: Mutex::default(),
        permits: Semaphore::new(0),
        stop_after: AtomicUsize::new(0),
        stopping: AtomicBool::new(false),
    });
    (
        Committer::new(FakeOp(state.clone()), max_items, max_bytes),
        state,
    )
}

fn calls(s: &State) -> Vec<Vec<u32>> {
    lock(&s.calls).clone()
}

fn q() -> QueueName {
    QueueName::parse("q").expect("queue")
}

/// Yields until `cond` holds (the lane's tasks run on this test's single thread).
async fn until(mut cond: impl FnMut() -> bool) {
    while !cond() {
        tokio::task::yield_now().await;
    }
}

fn waiting(c: &Committer<FakeOp>) -> usize {
    lock(&c.inner.lanes).get(&q()).map_or(0, |w| w.len())
}

type Reply = CommitReply<u32, u32>;

fn submit(c: &Committer<FakeOp>, items: Vec<u32>) -> tokio::task::JoinHandle<Reply> {
    let c = c.clone();
    tokio::spawn(async move { c.submit(&q(), items).await })
}

fn outs(r: Reply) -> (Vec<u32>, Vec<u32>) {
    (r.0, r.1.expect("ok"))
}

#[tokio::test]
async fn an_idle_lane_calls_at_once_and_later_callers_join_the_next_call_in_order() {
    let (c, s) = committer(100, 1000);
    let first = submit(&c, vec![1, 2]);
    until(|| calls(&s).len() == 1).await;
    let later: Vec<_> = [vec![3], vec![4, 5], vec![6]]
        .into_iter()
        .map(|items| submit(&c, items))
        .collect();
    until(|| waiting(&c) == 3).await;
    s.permits.add_permits(2);
    assert_eq!(outs(first.await.expect("join")), (vec![1, 2], vec![10, 20]));
    let mut got = Vec::new();
    for h in later {
        got.push(outs(h.await.expect("join")));
    }
    assert_eq!(
        got,
        vec![
            (vec![3], vec![30]),
            (vec![4, 5], vec![40, 50]),
            (vec![6], vec![60])
        ]
    );
    assert_eq!(calls(&s), vec![vec![1, 2], vec![3, 4, 5, 6]]);
    until(|| lock(&c.inner.lanes).is_empty()).await;
}

#[tokio::test]
async fn a_call_holds_at_most_max_items_and_max_bytes_of_whole_submissions() {
    let (c, s) = committer(3, 50);
    let first = submit(&c, vec![1]);
    until(|| calls(&s).len() == 1).await;
    let mut hs = Vec::new();
    for items in [
        vec![2, 3],
        vec![4, 5],
        vec![6],
        vec![40],
        vec![30],
        vec![99],
        vec![7],
    ] {
        hs.push(submit(&c, items));
        let n = hs.len();
        until(|| waiting(&c) == n).await;
    }
    s.permits.add_permits(100);
    first.await.expect("join").1.expect("ok");
    for h in hs {
        h.await.expect("join").1.expect("ok");
    }
    // [2,3] + [4,5] is 4 items, so is [4,5,6] + [40]; [40] + [30] is 70 bytes; [99] alone
    // is over 50 and goes on its own.
    assert_eq!(
        calls(&s),
        vec![
            vec![1],
            vec![2, 3],
            vec![4, 5, 6],
            vec![40],
            vec![30],
            vec![99],
            vec![7]
        ]
    );
}

#[tokio::test]
async fn a_bad_item_fails_its_own_caller_only() {
    let (c, s) = committer(100, 1000);
    let first = submit(&c, vec![1]);
    until(|| calls(&s).len() == 1).await;
    let good = submit(&c, vec![2]);
    until(|| waiting(&c) == 1).await;
    let bad = submit(&c, vec![3, BAD]);
    until(|| waiting(&c) == 2).await;
    let after = submit(&c, vec![4]);
    until(|| waiting(&c) == 3).await;
    s.permits.add_permits(2);
    first.await.expect("join").1.expect("ok");
    assert_eq!(good.await.expect("join").1.expect("ok"), vec![20]);
    let (items, r) = bad.await.expect("join");
    assert_eq!(items, vec![3, BAD], "its items come back");
    assert!(matches!(r, Err(Error::Internal(_))), "{r:?}");
    assert_eq!(after.await.expect("join").1.expect("ok"), vec![40]);
    assert_eq!(calls(&s).len(), 2, "one call for the three");
}

#[tokio::test]
async fn a_call_that_stops_answers_those_before_and_fails_the_rest() {
    let (c, s) = committer(100, 1000);
    let first = submit(&c, vec![1]);
    until(|| calls(&s).len() == 1).await;
    s.stopping.store(true, Ordering::Relaxed);
    s.stop_after.store(2, Ordering::Relaxed);
    let a = submit(&c, vec![2, 3]);
    until(|| waiting(&c) == 1).await;
    let b = submit(&c, vec![4]);
    until(|| waiting(&c) == 2).await;
    s.permits.add_permits(2);
    // The first call answers for its only item (stop_after 2).
    first.await.expect("join").1.expect("ok");
    assert_eq!(a.await.expect("join").1.expect("answered"), vec![20, 30]);
    let (items, r) = b.await.expect("join");
    assert_eq!(items, vec![4]);
    assert!(matches!(r, Err(Error::Unavailable(_))), "{r:?}");
}

#[tokio::test]
async fn a_cancelled_caller_leaves_its_neighbours_write_alone() {
    let (c, s) = committer(100, 1000);
    let first = submit(&c, vec![1]);
    until(|| calls(&s).len() == 1).await;
    // Both join the next call; the first of them gives up while it runs.
    let gone = submit(&c, vec![2]);
    until(|| waiting(&c) == 1).await;
    let stays = submit(&c, vec![3]);
    until(|| waiting(&c) == 2).await;
    s.permits.add_permits(1);
    first.await.expect("join").1.expect("ok");
    until(|| calls(&s).len() == 2).await;
    gone.abort();
    let _ = gone.await;
    s.permits.add_permits(1);
    assert_eq!(stays.await.expect("join").1.expect("ok"), vec![30]);
    assert_eq!(
        calls(&s)[1],
        vec![2, 3],
        "the cancelled caller's job was written too"
    );
}

#[tokio::test]
async fn a_first_caller_cancelled_during_its_call_hands_the_waiting_ones_on() {
    let (c, s) = committer(100, 1000);
    let first = submit(&c, vec![1]);
    until(|| calls(&s).len() == 1).await;
    let a = submit(&c, vec![2]);
    until(|| waiting(&c) == 1).await;
    let b = submit(&c, vec![3]);
    until(|| waiting(&c) == 2).await;
    first.abort();
    assert!(first.await.is_err(), "cancelled");
    s.permits.add_permits(1);
    assert_eq!(a.await.expect("join").1.expect("ok"), vec![20]);
    assert_eq!(b.await.expect("join").1.expect("ok"), vec![30]);
    assert_eq!(calls(&s), vec![vec![1], vec![2, 3]]);
    until(|| lock(&c.inner.lanes).is_empty()).await;
}

#[tokio::test]
async fn a_call_that_panics_fails_its_callers_and_the_lane_starts_afresh() {
    let (c, s) = committer(100, 1000);
    // A first caller's own call panics in its own task.
    s.permits.add_permits(1);
    assert!(
        submit(&c, vec![PANIC]).await.is_err(),
        "the caller's task panicked"
    );
    until(|| lock(&c.inner.lanes).is_empty()).await;
    // A coalesced call panics in the committer: its callers get an error.
    let first = submit(&c, vec![1]);
    until(|| calls(&s).len() == 2).await;
    let doomed = submit(&c, vec![PANIC]);
    until(|| waiting(&c) == 1).await;
    let neighbour = submit(&c, vec![2]);
    until(|| waiting(&c) == 2).await;
    s.permits.add_permits(2);
    first.await.expect("join").1.expect("ok");
    for h in [doomed, neighbour] {
        let (_, r) = h.await.expect("join");
        assert!(matches!(r, Err(Error::Internal(_))), "{r:?}");
    }
    until(|| lock(&c.inner.lanes).is_empty()).await;
    s.permits.add_permits(1);
    assert_eq!(
        submit(&c, vec![5]).await.expect("join").1.expect("ok"),
        vec![50]
    );
}
