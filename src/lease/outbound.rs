//! [`OutboundStream`]: the outbound half of a worker stream as tonic polls it. A lease
//! leaves the server only when this stream is polled, which hyper does only while the
//! worker's HTTP/2 window has room, so a worker that stops reading stops taking leases.
//! Dropping the stream (the worker went away) closes the session: the leases still in its
//! outbox go back to waiting without an attempt.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::Stream;

use super::hub::Hub;
use super::session::{Outbound, Session, Taken};

/// The messages for one worker stream, in the order they are to be sent; ends when the
/// session closes and everything queued was taken.
pub struct OutboundStream {
    hub: Hub,
    session: Arc<Session>,
    done: bool,
}

impl OutboundStream {
    pub(super) fn new(hub: Hub, session: Arc<Session>) -> OutboundStream {
        OutboundStream {
            hub,
            session,
            done: false,
        }
    }
}

impl Stream for OutboundStream {
    type Item = Outbound;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Outbound>> {
        if self.done {
            return Poll::Ready(None);
        }
        // The transport has room again: a stream whose overdue leases were released may
        // be leased to.
        if self.session.unstall() {
            self.hub.notify_queues(&self.session.queues);
        }
        match self.session.poll_outbound(cx) {
            Poll::Ready(Taken::Msg(m, low_water)) => {
                if low_water {
                    self.hub.notify_queues(&self.session.queues);
                }
                Poll::Ready(Some(m))
            }
            Poll::Ready(Taken::End) => {
                self.done = true;
                Poll::Ready(None)
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

impl Drop for OutboundStream {
    fn drop(&mut self) {
        self.hub.close_session(&self.session);
    }
}
