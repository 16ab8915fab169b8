use std::collections::VecDeque;

use futures::future::poll_fn;
use tonic::Code;

use super::*;

/// A body that yields `frames` one by one.
struct Frames(VecDeque<Bytes>);

impl http_body::Body for Frames {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        Poll::Ready(self.0.pop_front().map(|b| Ok(Frame::data(b))))
    }
}

/// The 5-byte gRPC header of a `len`-byte message, then `sent` bytes of it.
fn message(len: u32, sent: usize) -> Vec<u8> {
    let mut m = vec![0];
    m.extend_from_slice(&len.to_be_bytes());
    m.resize(5 + sent, 7);
    m
}

fn charged(budget: &RequestBudget, conn: u64, frames: Vec<Vec<u8>>) -> Charged {
    Charged {
        inner: Body::new(Frames(frames.into_iter().map(Bytes::from).collect())),
        messages: Messages::default(),
        budget: budget.clone(),
        conn: Some(ConnKey::Id(conn)),
        charged: 0,
        failed: false,
    }
}

/// Polls the next frame: Ok(true) a frame, Ok(false) the end, Err the refusal.
async fn next(body: &mut Charged) -> Result<bool, Status> {
    use http_body::Body as _;
    match poll_fn(|cx| Pin::new(&mut *body).poll_frame(cx)).await {
        Some(Ok(_)) => Ok(true),
        Some(Err(e)) => Err(e),
        None => Ok(false),
    }
}

const BIG: u32 = 1 << 20;

#[tokio::test]
async fn an_incomplete_message_is_charged_until_it_completes() {
    let budget = RequestBudget::new(10 << 20, 20 << 20);
    let half = message(BIG, 1 << 19);
    let rest = vec![7; 1 << 19];
    let mut body = charged(&budget, 1, vec![half, rest]);
    assert!(next(&mut body).await.expect("first half"));
    assert_eq!(budget.used(), 5 + (1 << 19), "header and half the message");
    assert!(next(&mut body).await.expect("second half"));
    assert_eq!(budget.used(), 0, "a whole message is the handler's");
    assert!(!next(&mut body).await.expect("end"));
}

#[tokio::test]
async fn a_message_that_arrives_in_one_frame_is_never_charged() {
    // Budgets far below the message: it still passes, as nothing stays buffered.
    let budget = RequestBudget::new(10, 10);
    let mut frame = message(1000, 1000);
    frame.extend(message(0, 0));
    frame.extend(message(20, 20));
    let mut body = charged(&budget, 1, vec![frame]);
    assert!(next(&mut body).await.expect("three whole messages"));
    assert_eq!(budget.used(), 0);
}

#[tokio::test]
async fn passing_the_connection_budget_fails_the_body_naming_the_flag() {
    let budget = RequestBudget::new(1 << 20, 4 << 20);
    let mut a = charged(&budget, 1, vec![message(BIG * 2, 600 << 10)]);
    let mut b = charged(&budget, 1, vec![message(BIG * 2, 600 << 10)]);
    let mut other = charged(&budget, 2, vec![message(BIG * 2, 600 << 10)]);
    assert!(next(&mut a).await.expect("600 KiB of 1 MiB"));
    let st = next(&mut b).await.expect_err("1.2 MiB on one connection");
    assert_eq!(st.code(), Code::ResourceExhausted);
    assert!(
        st.message().contains(&format!("at most {} bytes", 1 << 20))
            && st
                .message()
                .contains("--max-buffered-request-bytes-per-connection"),
        "{}",
        st.message()
    );
    assert!(!next(&mut b).await.expect("ended"), "a failed body ends");
    assert!(next(&mut other)
        .await
        .expect("another connection has its own budget"),);
    assert_eq!(
        budget.used(),
        2 * (5 + (600 << 10)),
        "the refused one charged nothing"
    );
    drop(a);
    drop(other);
    assert_eq!(budget.used(), 0, "a dropped body gives its charge back");
    assert!(budget.lock().conns.is_empty(), "no entry left behind");
}

#[tokio::test]
async fn a_refused_body_keeps_its_charge_until_dropped() {
    // tonic frees the bytes it holds when it drops the body, not when it sees the error.
    let budget = RequestBudget::new(1 << 20, 4 << 20);
    let mut body = charged(
        &budget,
        1,
        vec![message(BIG * 2, 600 << 10), vec![7; 600 << 10]],
    );
    assert!(next(&mut body).await.expect("600 KiB"));
    next(&mut body).await.expect_err("1.2 MiB");
    assert_eq!(budget.used(), 5 + (600 << 10), "still held by tonic");
    drop(body);
    assert_eq!(budget.used(), 0);
}

#[tokio::test]
async fn passing_the_process_budget_fails_the_body_naming_the_flag() {
    let budget = RequestBudget::new(1 << 20, (1 << 20) + (1 << 18));
    let mut held = Vec::new();
    for conn in 0..2 {
        held.push(charged(&budget, conn, vec![message(BIG * 2, 700 << 10)]));
    }
    assert!(next(&mut held[0]).await.expect("700 KiB"));
    let st = next(&mut held[1]).await.expect_err("1.4 MiB in all");
    assert_eq!(st.code(), Code::ResourceExhausted);
    assert!(
        st.message().contains("(--max-buffered-request-bytes)"),
        "{}",
        st.message()
    );
}

#[tokio::test]
async fn small_messages_go_on_when_the_budget_is_spent() {
    let budget = RequestBudget::new(1 << 20, 1 << 20);
    let mut hog = charged(&budget, 1, vec![message(BIG * 2, (1 << 20) - 5)]);
    assert!(next(&mut hog).await.expect("the whole budget"));
    // 64 KiB in two frames, on the same connection and on another one.
    for conn in [1, 2] {
        let small = SMALL_MESSAGE_BYTES as u32;
        let half = SMALL_MESSAGE_BYTES / 2;
        let mut body = charged(
            &budget,
            conn,
            vec![message(small, half), vec![7; SMALL_MESSAGE_BYTES - half]],
        );
        assert!(next(&mut body).await.expect("small: never refused"));
        assert!(budget.used() > 1 << 20, "charged past the budget");
        assert!(next(&mut body).await.expect("rest"));
        assert_eq!(budget.used(), 1 << 20, "given back when whole");
    }
    // One byte more than small is refused.
    let mut body = charged(
        &budget,
        2,
        vec![message(SMALL_MESSAGE_BYTES as u32 + 1, 100)],
    );
    next(&mut body).await.expect_err("not small");
}

#[test]
fn messages_follow_headers_split_across_frames() {
    let mut m = Messages::default();
    let stream = message(10, 10);
    m.feed(&stream[..3]);
    assert_eq!((m.pending(), m.exempt()), (3, true), "a partial header");
    m.feed(&stream[3..8]);
    assert_eq!(m.pending(), 8);
    m.feed(&stream[8..]);
    assert_eq!(m.pending(), 0);
    m.feed(&message(SMALL_MESSAGE_BYTES as u32 + 1, 1));
    assert_eq!((m.pending(), m.exempt()), (6, false));
}
