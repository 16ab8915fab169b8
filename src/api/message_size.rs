//! The largest gRPC message the server takes, sized from `--max-payload-bytes`, and the tower
//! layer that refuses a bigger one with RESOURCE_EXHAUSTED naming the limit.
//!
//! tonic checks its own decode limit (4 MiB unless set) and answers OUT_OF_RANGE, which the
//! gRPC status-code guide reserves for reading past the end of a range. [`MessageSizeLayer`]
//! reads the 5-byte gRPC frame header of every request message as the body streams in
//! (compressed flag, u32 big-endian length; see PROTOCOL-HTTP2.md in grpc/grpc) and fails
//! the body with RESOURCE_EXHAUSTED before any byte of an oversized message is buffered.
//! tonic surfaces that status as the call's answer, unary or stream. The services keep
//! tonic's own check at the same limit behind it.

use std::pin::Pin;
use std::task::{Context, Poll};

use http_body::{Frame, SizeHint};
use tonic::body::Body;
use tonic::codegen::Bytes;
use tonic::Status;
use tower::{Layer, Service};

use super::limits::MAX_BATCH;
use crate::Error;

/// Largest batch part of a message: a full batch of max-size payloads is allowed up to this.
pub const MAX_BATCH_MESSAGE_BYTES: usize = 64 << 20;
/// Room for everything in a message besides payloads (ids, metadata up to 64 x 4 KiB, an
/// error of 8 KiB + 64 KiB, framing).
pub const MESSAGE_OVERHEAD_BYTES: usize = 1 << 20;

/// The largest message, in bytes: room for a full batch ([`MAX_BATCH`] jobs) of
/// `max_payload_bytes` payloads, capped at [`MAX_BATCH_MESSAGE_BYTES`] but never below one
/// payload, plus [`MESSAGE_OVERHEAD_BYTES`]. 1 MiB payloads (the default) give 65 MiB.
pub fn max_message_bytes(max_payload_bytes: usize) -> usize {
    max_payload_bytes
        .saturating_mul(MAX_BATCH)
        .min(MAX_BATCH_MESSAGE_BYTES)
        .max(max_payload_bytes)
        .saturating_add(MESSAGE_OVERHEAD_BYTES)
}

/// Refuses request messages over `limit` bytes with RESOURCE_EXHAUSTED (see the module doc).
#[derive(Clone, Copy, Debug)]
pub struct MessageSizeLayer {
    /// The largest message, bytes.
    pub limit: usize,
}

impl<S> Layer<S> for MessageSizeLayer {
    type Service = MessageSize<S>;

    fn layer(&self, inner: S) -> MessageSize<S> {
        MessageSize {
            inner,
            limit: self.limit,
        }
    }
}

/// The service [`MessageSizeLayer`] wraps around the router.
#[derive(Clone, Debug)]
pub struct MessageSize<S> {
    inner: S,
    limit: usize,
}

impl<S> Service<http::Request<Body>> for MessageSize<S>
where
    S: Service<http::Request<Body>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<Body>) -> Self::Future {
        let limit = self.limit;
        self.inner.call(req.map(|body| {
            Body::new(Checked {
                inner: body,
                frames: FrameScan::new(limit),
                failed: false,
            })
        }))
    }
}

/// Where the scan is in the stream of length-prefixed messages.
#[derive(Debug)]
struct FrameScan {
    limit: usize,
    header: [u8; 5],
    header_len: usize,
    body_left: usize,
}

impl FrameScan {
    fn new(limit: usize) -> FrameScan {
        FrameScan {
            limit,
            header: [0; 5],
            header_len: 0,
            body_left: 0,
        }
    }

    /// Follows `data`; the length of the first message header seen over the limit.
    fn feed(&mut self, mut data: &[u8]) -> Result<(), usize> {
        while !data.is_empty() {
            if self.body_left > 0 {
                let n = self.body_left.min(data.len());
                self.body_left -= n;
                data = &data[n..];
                continue;
            }
            let n = (5 - self.header_len).min(data.len());
            self.header[self.header_len..self.header_len + n].copy_from_slice(&data[..n]);
            self.header_len += n;
            data = &data[n..];
            if self.header_len == 5 {
                self.header_len = 0;
                let [_, a, b, c, d] = self.header;
                let len = u32::from_be_bytes([a, b, c, d]) as usize;
                if len > self.limit {
                    return Err(len);
                }
                self.body_left = len;
            }
        }
        Ok(())
    }
}

/// A request body that fails with RESOURCE_EXHAUSTED at the header of an oversized message.
struct Checked {
    inner: Body,
    frames: FrameScan,
    failed: bool,
}

impl http_body::Body for Checked {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        if self.failed {
            return Poll::Ready(None);
        }
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if let Poll::Ready(Some(Ok(frame))) = &polled {
            if let Some(data) = frame.data_ref() {
                if let Err(len) = self.frames.feed(data) {
                    self.failed = true;
                    let limit = self.frames.limit;
                    return Poll::Ready(Some(Err(Error::TooLarge {
                        field: "message".into(),
                        reason: format!(
                            "the message is {len} bytes, the server's limit is {limit} bytes \
                             (sized from --max-payload-bytes)"
                        ),
                    }
                    .into())));
                }
            }
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.failed || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(len: u32) -> Vec<u8> {
        let mut h = vec![0];
        h.extend_from_slice(&len.to_be_bytes());
        h
    }

    #[test]
    fn sizes_from_the_payload_limit() {
        assert_eq!(max_message_bytes(1000), 1_000_000 + (1 << 20));
        assert_eq!(max_message_bytes(1 << 20), (65 << 20));
        assert_eq!(max_message_bytes(100 << 20), (101 << 20));
    }

    #[test]
    fn finds_an_oversized_header_across_chunk_boundaries() {
        let mut s = FrameScan::new(10);
        let mut stream = header(10);
        stream.extend_from_slice(&[7; 10]);
        stream.extend_from_slice(&header(0));
        stream.extend_from_slice(&header(11));
        // Fed one byte at a time, the third header is the first over the limit.
        let mut seen = None;
        for b in &stream {
            if let Err(len) = s.feed(std::slice::from_ref(b)) {
                seen = Some(len);
                break;
            }
        }
        assert_eq!(seen, Some(11));
        let mut s = FrameScan::new(10);
        assert_eq!(s.feed(&stream), Err(11));
    }
}
