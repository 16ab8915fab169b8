//! The low-level `Subscribe` stream and the unary settle calls.
//!
//! [`Client::subscribe`] opens a stream and returns its two halves: a [`StreamSender`]
//! (acks, fails, progress reports, heartbeats, credits, drain) and a [`LeaseStream`]
//! (leases, settled replies, cancels, progress replies, the server's draining notice). Nothing here runs handlers, counts credits, heartbeats or
//! reconnects: that is [`crate::Worker`]'s job. Use this for programs that drive the
//! protocol themselves (`jobwire bench`'s hot loop).

use std::time::Duration;

use tokio::sync::mpsc;
use tokio_stream::wrappers::UnboundedReceiverStream;

use crate::client::pb_duration;
use crate::pb;
use crate::pb::subscribe_request::Message as In;
use crate::pb::subscribe_response::Message as Out;
use crate::{Client, Error};

/// What the server sends on a stream.
// Leases are nearly every message: boxing them would cost an allocation each for nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug)]
pub enum StreamEvent {
    /// A job leased to this stream (one credit used).
    Lease(pb::Lease),
    /// The outcome of an ack or fail sent on this stream: `code` 0 applied, 9
    /// (FAILED_PRECONDITION) the lease was lost, others refused (see `message`).
    Settled(pb::Settled),
    /// The server is shutting down: no more leases on this stream; finish what is held
    /// within `grace` (the server's shutdown grace), then reconnect once the stream ends.
    Draining {
        /// How long the server waits for acks before handing the leases back.
        grace: Option<Duration>,
    },
    /// A job this stream holds was cancelled: stop working on it and settle it (a Fail ends
    /// it CANCELLED, an Ack COMPLETED) before `revoke_time`.
    Cancel(pb::CancelLease),
    /// The outcome of a progress report sent on this stream (`code` 0 saved, 9 the lease
    /// was lost, others refused), in the order the reports were sent.
    ProgressSaved(pb::ProgressSaved),
}

/// The sending half of a stream. Sends never block (the queue is unbounded; HTTP/2 flow
/// control applies below it); each returns false once the stream is gone. Dropping every
/// clone half-closes the stream, and the server then ends it.
#[derive(Clone, Debug)]
pub struct StreamSender {
    tx: mpsc::UnboundedSender<pb::SubscribeRequest>,
}

impl StreamSender {
    /// Sends one request.
    pub fn send(&self, m: In) -> bool {
        self.tx
            .send(pb::SubscribeRequest { message: Some(m) })
            .is_ok()
    }

    /// Acks `lease` (the job completed). The server answers with a Settled and returns the
    /// credit.
    pub fn ack(&self, lease: &pb::Lease) -> bool {
        self.ack_with_result(lease, Vec::new())
    }

    /// Acks `lease` with `result` bytes, kept on the completed job (up to the server's
    /// result limit, 64 KiB by default: longer is refused with RESOURCE_EXHAUSTED and the
    /// job stays leased).
    pub fn ack_with_result(&self, lease: &pb::Lease, result: Vec<u8>) -> bool {
        let (queue, job_id) = lease_ids(lease);
        self.send(In::Ack(pb::AckRequest {
            result,
            queue,
            job_id,
            lease_token: lease.lease_token.clone(),
        }))
    }

    /// Saves progress and/or a checkpoint of a held job; the server answers with a
    /// [`StreamEvent::ProgressSaved`].
    pub fn progress(&self, req: pb::ReportProgressRequest) -> bool {
        self.send(In::Progress(req))
    }

    /// Fails an attempt (see [`pb::FailRequest`]). The server answers with a Settled and
    /// returns the credit.
    pub fn fail(&self, req: pb::FailRequest) -> bool {
        self.send(In::Fail(req))
    }

    /// Grants `n` more credits (1 to 10000).
    pub fn grant_credits(&self, n: u32) -> bool {
        self.send(In::GrantCredits(pb::GrantCredits { credits: n }))
    }

    /// Says the worker is alive (any message does; this one carries nothing).
    pub fn heartbeat(&self) -> bool {
        self.send(In::Heartbeat(pb::Heartbeat {}))
    }

    /// Asks for no more leases on this stream; held jobs are still settled on it.
    pub fn drain(&self) -> bool {
        self.send(In::Drain(pb::DrainStream {}))
    }

    /// True once the stream is gone (its request side was dropped by tonic).
    pub fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }
}

/// The receiving half of a stream.
#[derive(Debug)]
pub struct LeaseStream {
    rx: tonic::Streaming<pb::SubscribeResponse>,
}

impl LeaseStream {
    /// The next message; `Ok(None)` when the server ended the stream cleanly, `Err` when it
    /// broke (a status from the server or a transport error).
    pub async fn next(&mut self) -> Result<Option<StreamEvent>, tonic::Status> {
        loop {
            let Some(m) = self.rx.message().await? else {
                return Ok(None);
            };
            match m.message {
                Some(Out::Lease(l)) => return Ok(Some(StreamEvent::Lease(l))),
                Some(Out::Settled(s)) => return Ok(Some(StreamEvent::Settled(s))),
                Some(Out::Draining(d)) => {
                    let grace = d.grace.and_then(|g| {
                        u64::try_from(g.seconds)
                            .ok()
                            .map(|s| Duration::new(s, g.nanos.max(0) as u32))
                    });
                    return Ok(Some(StreamEvent::Draining { grace }));
                }
                Some(Out::Cancel(c)) => return Ok(Some(StreamEvent::Cancel(c))),
                Some(Out::ProgressSaved(p)) => return Ok(Some(StreamEvent::ProgressSaved(p))),
                // A message kind newer than this client: ignore it.
                None => continue,
            }
        }
    }
}

/// `(queue, job_id)` of a lease.
pub fn lease_ids(lease: &pb::Lease) -> (String, String) {
    lease
        .job
        .as_ref()
        .map(|j| (j.queue.clone(), j.job_id.clone()))
        .unwrap_or_default()
}

impl Client {
    /// Opens a `Subscribe` stream on `queues` holding at most `credits` jobs at once (1 to
    /// 10000), named `worker_id` (empty: the server makes one up). Returns when the server
    /// accepted it (response headers received).
    pub async fn subscribe(
        &self,
        queues: &[String],
        credits: u32,
        worker_id: &str,
    ) -> Result<(StreamSender, LeaseStream), Error> {
        let (tx, rx) = mpsc::unbounded_channel();
        let sender = StreamSender { tx };
        sender.send(In::Open(pb::OpenStream {
            queues: queues.to_vec(),
            credits,
            worker_id: worker_id.to_owned(),
        }));
        let rx = self
            .workers()
            .subscribe(UnboundedReceiverStream::new(rx))
            .await?
            .into_inner();
        Ok((sender, LeaseStream { rx }))
    }

    /// Acks a lease outside a stream (unary Ack). FAILED_PRECONDITION: the lease was lost
    /// (expired and leased again, or already settled). Not retried here.
    pub async fn ack(&self, queue: &str, job_id: &str, lease_token: &str) -> Result<(), Error> {
        self.ack_with_result(queue, job_id, lease_token, Vec::new())
            .await
    }

    /// [`Client::ack`] with `result` bytes kept on the completed job (RESOURCE_EXHAUSTED
    /// beyond the server's result limit, 64 KiB by default; the job stays leased).
    pub async fn ack_with_result(
        &self,
        queue: &str,
        job_id: &str,
        lease_token: &str,
        result: Vec<u8>,
    ) -> Result<(), Error> {
        self.workers()
            .ack(pb::AckRequest {
                queue: queue.into(),
                job_id: job_id.into(),
                lease_token: lease_token.into(),
                result,
            })
            .await?;
        Ok(())
    }

    /// Fails an attempt outside a stream (unary Fail). Not retried here.
    pub async fn fail(&self, req: pb::FailRequest) -> Result<pb::FailResponse, Error> {
        Ok(self.workers().fail(req).await?.into_inner())
    }

    /// Pushes a lease's deadline to now + `duration` (`None`: the server's lease duration),
    /// presenting its lease token; returns the new deadline. FAILED_PRECONDITION: the lease
    /// was lost.
    pub async fn extend_lease(
        &self,
        queue: &str,
        job_id: &str,
        lease_token: &str,
        duration: Option<Duration>,
    ) -> Result<Option<prost_types::Timestamp>, Error> {
        let r = self
            .workers()
            .extend_lease(pb::ExtendLeaseRequest {
                queue: queue.into(),
                job_id: job_id.into(),
                lease_token: lease_token.into(),
                lease_duration: duration.map(pb_duration),
            })
            .await?;
        Ok(r.into_inner().lease_deadline)
    }
}
