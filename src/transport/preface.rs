//! The deadline of a new gRPC connection: it must send the HTTP/2 connection preface and its
//! first frame (the SETTINGS frame every client sends with it) within
//! `--grpc-preface-timeout`, or it is closed.
//!
//! hyper's keepalive PINGs (`--grpc-keepalive-interval`) start only once the HTTP/2 handshake
//! is done, and the handshake itself waits for the preface without a time limit, so a client
//! that connects and says nothing (or half a preface) was held for ever. The deadline watches
//! the bytes hyper reads through [`super::Conn`]; after the first frame it is dropped and the
//! keepalive PINGs take over (a live client's HTTP/2 stack answers them by itself, however
//! idle its application is).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::Sleep;

/// Length of the HTTP/2 client connection preface (`PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n`).
const PREFACE_LEN: usize = 24;
/// Length of an HTTP/2 frame header.
const FRAME_HEADER_LEN: usize = 9;

/// Watches the first bytes of a connection against a deadline.
pub(super) struct PrefaceDeadline {
    sleep: Pin<Box<Sleep>>,
    head: [u8; PREFACE_LEN + FRAME_HEADER_LEN],
    seen: usize,
}

impl PrefaceDeadline {
    /// A deadline `limit` from now.
    pub(super) fn new(limit: Duration) -> Self {
        Self {
            sleep: Box::pin(tokio::time::sleep(limit)),
            head: [0; PREFACE_LEN + FRAME_HEADER_LEN],
            seen: 0,
        }
    }

    /// Notes `bytes` read from the client; true once the preface and the whole first frame
    /// have arrived (the bytes are not checked: hyper refuses a wrong preface itself).
    pub(super) fn saw(&mut self, bytes: &[u8]) -> bool {
        let copy = bytes.len().min(self.head.len().saturating_sub(self.seen));
        if copy > 0 {
            self.head[self.seen..self.seen + copy].copy_from_slice(&bytes[..copy]);
        }
        self.seen = self.seen.saturating_add(bytes.len());
        if self.seen < self.head.len() {
            return false;
        }
        let len = &self.head[PREFACE_LEN..PREFACE_LEN + 3];
        let len = (usize::from(len[0]) << 16) | (usize::from(len[1]) << 8) | usize::from(len[2]);
        self.seen >= self.head.len() + len
    }

    /// True once the deadline has passed (registers the waker otherwise).
    pub(super) fn poll_expired(&mut self, cx: &mut Context<'_>) -> bool {
        matches!(self.sleep.as_mut().poll(cx), Poll::Ready(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

    fn settings(payload: usize) -> Vec<u8> {
        let mut f = vec![0, 0, payload as u8, 4, 0, 0, 0, 0, 0];
        f.resize(FRAME_HEADER_LEN + payload, 0);
        f
    }

    #[tokio::test]
    async fn done_after_the_preface_and_the_whole_first_frame_in_any_pieces() {
        let mut all = PREFACE.to_vec();
        all.extend(settings(12));
        for cut in [1, 5, 24, 30, 33, 40, all.len() - 1] {
            let mut d = PrefaceDeadline::new(Duration::from_secs(1));
            assert!(!d.saw(&all[..cut]), "not done at {cut}");
            assert!(d.saw(&all[cut..]), "done with the rest after {cut}");
        }
        let mut d = PrefaceDeadline::new(Duration::from_secs(1));
        assert!(d.saw(&all), "all at once");
        let mut d = PrefaceDeadline::new(Duration::from_secs(1));
        assert!(!d.saw(PREFACE), "half: the preface alone");
    }

    #[tokio::test(start_paused = true)]
    async fn expires_after_its_limit() {
        let mut d = PrefaceDeadline::new(Duration::from_secs(10));
        let waker = futures::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        assert!(!d.poll_expired(&mut cx));
        tokio::time::advance(Duration::from_secs(11)).await;
        assert!(d.poll_expired(&mut cx));
    }
}
