//! The budget of request bytes the gRPC port buffers before a message is whole, per
//! connection (`--max-buffered-request-bytes-per-connection`) and for the whole process
//! (`--max-buffered-request-bytes`), and the tower layer that enforces it.
//!
//! Why: tonic decodes a message only once all of it has arrived, and holds its bytes until
//! then (it even reserves the announced length up front). hyper hands DATA frames to tonic as
//! they come and gives the flow-control window back at once, so HTTP/2 flow control bounds
//! only what is in flight, not what tonic holds: a client that sends most of a big message
//! and never the rest makes the server hold it for as long as the call lives, on every stream
//! of every connection, and before any handler has looked at who is calling.
//!
//! What is charged: [`RequestBudgetLayer`] follows the length-prefixed messages of every
//! request body (the 5-byte gRPC header: compressed flag, u32 big-endian length) and, after
//! each DATA frame, charges the bytes received so far of the message that is still
//! incomplete to the connection's budget and to the process's. The charge is given back when
//! the message completes (tonic then decodes it and the handler owns it) or when the body is
//! dropped (the call ended, was refused or reset). A message that arrives whole within one
//! frame is never charged. When a charge would pass a budget, the body fails with
//! RESOURCE_EXHAUSTED naming the flag and the limit ([`crate::Error::RequestMemory`]); tonic
//! answers the call with it and drops the body, which frees the stream's bytes and gives the
//! charge back.
//!
//! Small messages are exempt from refusal: a message whose announced length is at most
//! [`SMALL_MESSAGE_BYTES`] is charged (so it counts against big ones) but never refused, so
//! honest Enqueue/Ack/ExtendLease traffic goes on while an attacker holds the budget. What
//! that lets through is bounded by SMALL_MESSAGE_BYTES per stream, times
//! `--max-concurrent-streams` per connection.
//!
//! The budget counts bytes received, not the process's RSS: jemalloc keeps the freed pages of
//! allocations under 8 MiB for up to its decay time (10 s), so refused and freed messages
//! can lift RSS to about twice the budget for a while (`docs/security.md` has the figures).
//!
//! The connection is the [`crate::transport::ConnInfo`] id jobwire's listener puts into the
//! request's extensions, else the peer address tonic's listener records; a request with
//! neither is charged to the process budget only.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use http_body::{Frame, SizeHint};
use tonic::body::Body;
use tonic::codegen::Bytes;
use tonic::Status;
use tower::{Layer, Service};

use crate::abuse::ConnKey;
use crate::config::RequestMemoryArgs;
use crate::Error;

/// Messages up to this many bytes (as their header announces) are charged but never refused:
/// 64 KiB covers every control message and typical payloads.
pub const SMALL_MESSAGE_BYTES: usize = 64 << 10;

/// The shared counters of the budget; cheap to clone.
#[derive(Clone, Debug)]
pub struct RequestBudget {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    per_connection: usize,
    process: usize,
    used: Mutex<Used>,
}

#[derive(Debug, Default)]
struct Used {
    total: usize,
    /// Bytes charged per connection; an entry goes when its charge is back to 0.
    conns: HashMap<ConnKey, usize>,
}

impl RequestBudget {
    /// A budget of `per_connection` bytes per connection and `process` bytes in all.
    pub fn new(per_connection: usize, process: usize) -> RequestBudget {
        RequestBudget {
            inner: Arc::new(Inner {
                per_connection,
                process,
                used: Mutex::new(Used::default()),
            }),
        }
    }

    /// The budget of the `--max-buffered-request-bytes*` flags.
    pub fn from_args(args: &RequestMemoryArgs) -> RequestBudget {
        let bytes = |v: u64| usize::try_from(v).unwrap_or(usize::MAX);
        RequestBudget::new(
            bytes(args.max_buffered_request_bytes_per_connection),
            bytes(args.max_buffered_request_bytes),
        )
    }

    /// Bytes charged now, in all.
    pub fn used(&self) -> usize {
        self.lock().total
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Used> {
        // The critical sections only add and subtract: a panic cannot leave them half done.
        self.inner
            .used
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Charges `bytes` to `conn` and the process. Unless `exempt`, refuses (charging nothing)
    /// when either would pass its limit.
    fn charge(&self, conn: Option<&ConnKey>, bytes: usize, exempt: bool) -> Result<(), Error> {
        let mut used = self.lock();
        let on_conn = conn.map_or(0, |c| used.conns.get(c).copied().unwrap_or(0));
        if !exempt {
            if conn.is_some() && on_conn.saturating_add(bytes) > self.inner.per_connection {
                return Err(Error::RequestMemory {
                    limit: self.inner.per_connection as u64,
                    scope: "connection",
                    flag: "max-buffered-request-bytes-per-connection",
                });
            }
            if used.total.saturating_add(bytes) > self.inner.process {
                return Err(Error::RequestMemory {
                    limit: self.inner.process as u64,
                    scope: "server",
                    flag: "max-buffered-request-bytes",
                });
            }
        }
        used.total = used.total.saturating_add(bytes);
        if let Some(c) = conn {
            used.conns.insert(c.clone(), on_conn.saturating_add(bytes));
        }
        Ok(())
    }

    /// Gives back `bytes` charged to `conn` and the process.
    fn release(&self, conn: Option<&ConnKey>, bytes: usize) {
        if bytes == 0 {
            return;
        }
        let mut used = self.lock();
        used.total = used.total.saturating_sub(bytes);
        if let Some(c) = conn {
            if let Some(n) = used.conns.get_mut(c) {
                *n = n.saturating_sub(bytes);
                if *n == 0 {
                    used.conns.remove(c);
                }
            }
        }
    }
}

/// Wraps every request body in the budget (see the module doc).
#[derive(Clone, Debug)]
pub struct RequestBudgetLayer {
    /// The counters, shared by every connection.
    pub budget: RequestBudget,
}

impl<S> Layer<S> for RequestBudgetLayer {
    type Service = Budgeted<S>;

    fn layer(&self, inner: S) -> Budgeted<S> {
        Budgeted {
            inner,
            budget: self.budget.clone(),
        }
    }
}

/// The service [`RequestBudgetLayer`] wraps around the router.
#[derive(Clone, Debug)]
pub struct Budgeted<S> {
    inner: S,
    budget: RequestBudget,
}

/// The connection `req` came on (see the module doc).
fn conn_key<B>(req: &http::Request<B>) -> Option<ConnKey> {
    let ext = req.extensions();
    ext.get::<crate::transport::ConnInfo>()
        .map(|c| ConnKey::Id(c.id))
        .or_else(|| {
            ext.get::<tonic::transport::server::TcpConnectInfo>()
                .and_then(|c| c.remote_addr())
                .map(ConnKey::Peer)
        })
}

impl<S> Service<http::Request<Body>> for Budgeted<S>
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
        let conn = conn_key(&req);
        let budget = self.budget.clone();
        self.inner.call(req.map(|body| {
            Body::new(Charged {
                inner: body,
                messages: Messages::default(),
                budget,
                conn,
                charged: 0,
                failed: false,
            })
        }))
    }
}

/// Where a body is in its stream of length-prefixed messages.
#[derive(Debug, Default)]
struct Messages {
    /// Header bytes of the current message seen so far (0..=5).
    header: [u8; 5],
    header_len: usize,
    /// The current message's announced length, once its header is whole.
    len: Option<usize>,
    /// Bytes of the current message's body still to come.
    body_left: usize,
}

impl Messages {
    /// Follows `data` through the messages.
    fn feed(&mut self, mut data: &[u8]) {
        while !data.is_empty() {
            if self.len.is_some() {
                let n = self.body_left.min(data.len());
                self.body_left -= n;
                data = &data[n..];
                if self.body_left == 0 {
                    self.len = None;
                }
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
                if len > 0 {
                    self.len = Some(len);
                    self.body_left = len;
                }
            }
        }
    }

    /// Bytes received of the message that is still incomplete (its header included); 0
    /// between messages.
    fn pending(&self) -> usize {
        match self.len {
            Some(len) => 5 + len - self.body_left,
            None => self.header_len,
        }
    }

    /// Is the incomplete message one that is never refused (small, or its length not yet
    /// known: at most 4 header bytes are pending then)?
    fn exempt(&self) -> bool {
        self.len.is_none_or(|len| len <= SMALL_MESSAGE_BYTES)
    }
}

/// A request body charged to the budget while a message is incomplete.
struct Charged {
    inner: Body,
    messages: Messages,
    budget: RequestBudget,
    conn: Option<ConnKey>,
    /// Bytes charged now.
    charged: usize,
    failed: bool,
}

impl Charged {
    /// Brings the charge to the incomplete message's bytes after a frame of `data`.
    fn account(&mut self, data: &[u8]) -> Result<(), Error> {
        self.messages.feed(data);
        let pending = self.messages.pending();
        if pending > self.charged {
            self.budget.charge(
                self.conn.as_ref(),
                pending - self.charged,
                self.messages.exempt(),
            )?;
        } else {
            self.budget
                .release(self.conn.as_ref(), self.charged - pending);
        }
        self.charged = pending;
        Ok(())
    }
}

impl Drop for Charged {
    fn drop(&mut self) {
        self.budget.release(self.conn.as_ref(), self.charged);
    }
}

impl http_body::Body for Charged {
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
                let data = data.clone();
                if let Err(e) = self.account(&data) {
                    // The charge stays until the body is dropped: tonic frees the bytes it
                    // holds then, not when it sees the error.
                    self.failed = true;
                    return Poll::Ready(Some(Err(e.into())));
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
mod tests;
