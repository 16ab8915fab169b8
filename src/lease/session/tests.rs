//! The turns of a stream on several queues (`Session::take_credit_for`), at given times.

use super::turns::TURN_SLICE;
use super::*;

fn session(credits: u32) -> Session {
    let queues = ["a", "b", "c"]
        .iter()
        .map(|q| QueueName::parse(q).expect("name"))
        .collect();
    Session::new(
        1,
        "w".into(),
        queues,
        credits,
        0,
        Duration::from_secs(1),
        Default::default(),
    )
}

fn q(name: &str) -> QueueName {
    QueueName::parse(name).expect("name")
}

const MS: Duration = Duration::from_millis(1);

#[test]
fn a_one_credit_turn_lasts_its_slice_then_passes_on() {
    let s = session(1);
    let busy = |_: &QueueName| true;
    assert!(s.take_credit_at(&q("a"), busy, Duration::ZERO));
    s.unreserve();
    // Within the slice the freed credit stays with a (the ack leases a's next job).
    assert!(s.take_credit_at(&q("a"), busy, MS));
    s.unreserve();
    assert!(
        !s.take_credit_at(&q("b"), busy, MS),
        "b waits for a's slice"
    );
    // Past the slice the turn passes on, whoever asks first.
    assert!(!s.take_credit_at(&q("a"), busy, TURN_SLICE + MS));
    assert!(s.take_credit_at(&q("b"), busy, TURN_SLICE + MS));
    s.unreserve();
    // b's own slice began when it took its credit.
    assert!(s.take_credit_at(&q("b"), busy, TURN_SLICE + 2 * MS));
    s.unreserve();
    assert!(!s.take_credit_at(&q("a"), busy, 2 * TURN_SLICE + 2 * MS));
    assert!(s.take_credit_at(&q("c"), busy, 2 * TURN_SLICE + 2 * MS));
}

#[test]
fn a_slow_job_ends_its_one_credit_turn_at_its_ack() {
    let s = session(1);
    let busy = |_: &QueueName| true;
    assert!(s.take_credit_at(&q("a"), busy, Duration::ZERO));
    // The job took longer than the slice: its ack's credit goes to the next queue.
    s.unreserve();
    assert!(!s.take_credit_at(&q("a"), busy, 10 * TURN_SLICE));
    assert!(s.take_credit_at(&q("b"), busy, 10 * TURN_SLICE));
}

#[test]
fn a_queue_without_backlog_does_not_hold_its_slice() {
    let s = session(1);
    assert!(s.take_credit_at(&q("a"), |_: &QueueName| true, Duration::ZERO));
    s.unreserve();
    // a has nothing leasable: b takes the credit within a's slice.
    let only_b_c = |x: &QueueName| x.as_str() != "a";
    assert!(s.take_credit_at(&q("b"), only_b_c, MS));
}

#[test]
fn a_turn_of_several_credits_is_not_sliced() {
    // Six credits on three busy queues: a turn is two credits, whatever the time.
    let s = session(6);
    let busy = |_: &QueueName| true;
    assert!(s.take_credit_at(&q("a"), busy, Duration::ZERO));
    assert!(s.take_credit_at(&q("a"), busy, Duration::ZERO));
    assert!(!s.take_credit_at(&q("a"), busy, Duration::ZERO));
    assert!(s.take_credit_at(&q("b"), busy, Duration::ZERO));
}

#[test]
fn a_stream_of_two_credits_keeps_a_turn_per_credit() {
    // Two credits on three busy queues: turns of one credit too, but not sliced.
    let s = session(2);
    let busy = |_: &QueueName| true;
    assert!(s.take_credit_at(&q("a"), busy, Duration::ZERO));
    assert!(!s.take_credit_at(&q("a"), busy, Duration::ZERO), "b's turn");
    assert!(s.take_credit_at(&q("b"), busy, Duration::ZERO));
    s.unreserve();
    assert!(!s.take_credit_at(&q("b"), busy, MS), "c's turn");
    assert!(s.take_credit_at(&q("c"), busy, MS));
    assert_eq!(s.slice_left(), None);
}

#[test]
fn the_take_that_ends_a_slice_says_so_and_the_slice_left_is_known() {
    let s = session(1);
    let busy = |_: &QueueName| true;
    assert_eq!(s.slice_left(), None, "no turn yet");
    assert!(s.take_credit_at(&q("a"), busy, Duration::ZERO));
    assert!(s.slice_left().is_some_and(|d| d <= TURN_SLICE));
    s.unreserve();
    assert!(!s.take_turn_passed());
    // c's loop notices a's slice is over: the turn goes to b, who must be woken.
    assert!(!s.take_credit_at(&q("c"), busy, TURN_SLICE));
    assert!(
        s.take_turn_passed(),
        "the caller is told to wake the other queues"
    );
    assert!(!s.take_turn_passed(), "once");
    assert_eq!(s.slice_left(), None, "b's turn has not begun");
    assert!(s.take_credit_at(&q("b"), busy, TURN_SLICE));
}
