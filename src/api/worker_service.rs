//! `jobwire.v1.WorkerService`: the Subscribe stream (open, credits, leases, acks and fails
//! coalesced per queue across streams by the hub's settle lanes, heartbeats, drain, progress
//! reports) and the unary Ack, Fail, ExtendLease and ReportProgress.

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures::{FutureExt, Stream, StreamExt};
use tonic::{Request, Response, Status, Streaming};

use super::convert::{self, ApiLimits};
use super::limits::*;
use super::pb;
use super::pb::subscribe_request::Message as In;
use super::progress::{progress_args, ProgressArgs};
use super::worker_args::{ack_args, fail_args, open_args, outbound_pb, settle_error};
use crate::abuse::{ConnKey, StreamLimits};
use crate::auth::{Auth, Principal, Rpc};
use crate::jobs::{Disposition, JobState, QueueName};
use crate::lease::{Hub, Outbound, Session, Settled};
use crate::store::{AckItem, AckOutcome, FailItem, FailOutcome};
use crate::telemetry::Untrusted;
use crate::Error;

/// How long a new stream may take to send its `open` message.
const OPEN_TIMEOUT: Duration = Duration::from_secs(30);
/// Most inbound messages handled as one batch.
const INBOUND_BATCH: usize = 256;

/// The WorkerService handlers.
pub struct WorkerApi {
    hub: Hub,
    auth: Auth,
    streams: StreamLimits,
    limits: ApiLimits,
}

impl WorkerApi {
    /// Handlers over `hub`; every call (and every Ack and Fail on a stream) is authorized by
    /// `auth`. Subscribe streams are counted against the default stream limits.
    pub fn new(hub: Hub, auth: Auth) -> WorkerApi {
        let streams = StreamLimits::new(&crate::config::AbuseArgs::default());
        WorkerApi {
            hub,
            auth,
            streams,
            limits: ApiLimits::default(),
        }
    }

    /// The same, with the server's checkpoint and result limits (the defaults otherwise).
    pub fn with_limits(self, limits: ApiLimits) -> WorkerApi {
        WorkerApi { limits, ..self }
    }

    /// The same, counting Subscribe streams against `streams`.
    pub fn with_stream_limits(self, streams: StreamLimits) -> WorkerApi {
        WorkerApi { streams, ..self }
    }
}

type SubscribeStream = Pin<Box<dyn Stream<Item = Result<pb::SubscribeResponse, Status>> + Send>>;

impl WorkerApi {
    /// Applies a batch of stream messages: acks and fails grouped per queue and handed to
    /// the hub's lanes (one script call per queue shared with other streams), answered with
    /// one Settled each.
    async fn handle_batch(
        &self,
        session: &Arc<Session>,
        principal: &Principal,
        batch: Vec<pb::SubscribeRequest>,
    ) -> Result<(), Error> {
        // A drain ends the stream only after every reply of this batch is queued.
        let _handling = session.handling();
        let mut acks: BTreeMap<QueueName, Vec<AckItem>> = BTreeMap::new();
        let mut fails: BTreeMap<QueueName, Vec<FailItem>> = BTreeMap::new();
        let mut reports: Vec<ProgressArgs> = Vec::new();
        let refuse = |queue: &str, id: &str, token: &str, e: Error| {
            session.send(Outbound::Settled(Settled {
                queue: queue.to_owned(),
                id: id.to_owned(),
                token: token.to_owned(),
                result: Err(e),
            }));
        };
        for m in batch {
            match m.message {
                // An Ack or Fail on a queue the principal may not work is refused like any
                // other bad one: a Settled with the code, the stream goes on.
                Some(In::Ack(a)) => match ack_args(&a, &self.limits).and_then(|(q, item)| {
                    self.auth.authorize(principal, Rpc::Ack, &q)?;
                    Ok((q, item))
                }) {
                    Ok((q, item)) => acks.entry(q).or_default().push(item),
                    Err(e) => refuse(&a.queue, &a.job_id, &a.lease_token, e),
                },
                Some(In::Fail(f)) => match fail_args(&f).and_then(|(q, item)| {
                    self.auth.authorize(principal, Rpc::Fail, &q)?;
                    Ok((q, item))
                }) {
                    Ok((q, item)) => fails.entry(q).or_default().push(item),
                    Err(e) => refuse(&f.queue, &f.job_id, &f.lease_token, e),
                },
                Some(In::GrantCredits(g)) => {
                    if !CREDITS_RANGE.contains(&g.credits) {
                        return Err(Error::invalid(
                            "grant_credits.credits",
                            format!("is {}, must be in [1, 10000]", g.credits),
                        ));
                    }
                    self.hub.grant(session, g.credits);
                }
                Some(In::Heartbeat(_)) => {}
                // Answered with a ProgressSaved, refused or not; the stream goes on.
                Some(In::Progress(p)) => {
                    let (queue, id, token) =
                        (p.queue.clone(), p.job_id.clone(), p.lease_token.clone());
                    match progress_args(p, &self.limits).and_then(|a| {
                        self.auth.authorize(principal, Rpc::ReportProgress, &a.0)?;
                        Ok(a)
                    }) {
                        Ok(a) => reports.push(a),
                        Err(e) => {
                            session.send(Outbound::ProgressSaved(Settled {
                                queue,
                                id,
                                token,
                                result: Err(e),
                            }));
                        }
                    }
                }
                Some(In::Drain(_)) => self.hub.drain_session(session),
                Some(In::Open(_)) => {
                    return Err(Error::invalid("open", "the stream is already open"))
                }
                None => return Err(Error::invalid("message", "is empty")),
            }
        }
        // Progress reports first: one sent before its job's ack in the same batch is saved.
        let saves = reports
            .into_iter()
            .map(|(queue, id, token, report)| async move {
                let result = self.save_progress(&queue, &id, &token, &report).await;
                Settled {
                    queue: queue.to_string(),
                    id,
                    token,
                    result: result.map(|_| None),
                }
            });
        for s in futures::future::join_all(saves).await {
            session.send(Outbound::ProgressSaved(s));
        }
        // Acks before fails, as they arrived within the batch; queues side by side. Each
        // goes into its queue's shared lane, with what other streams settle meanwhile.
        // A stream's acks may bring its next jobs in the same call; they follow the Settled
        // replies down the stream.
        let ack_calls = acks.into_iter().map(|(queue, items)| async move {
            self.hub
                .ack_stream(
                    session,
                    &queue,
                    items,
                    |(AckItem { id, token, .. }, r, span)| {
                        let result = r.and_then(|r| settle_error(&queue, &id, r));
                        if let Ok(o) = &result {
                            record_ack(&queue, &id, o, &span);
                        }
                        let result = result.map(|_| Some(JobState::Completed));
                        session.send(Outbound::Settled(Settled {
                            queue: queue.to_string(),
                            id,
                            token,
                            result,
                        }));
                    },
                )
                .await
        });
        for r in futures::future::join_all(ack_calls).await {
            r?;
        }
        let fail_calls = fails.into_iter().map(|(queue, items)| async move {
            let r = self.hub.fail(&queue, items).await;
            (queue, r)
        });
        for (queue, settles) in futures::future::join_all(fail_calls).await {
            for (item, r) in settles? {
                let result = r.and_then(|r| settle_error(&queue, &item.id, r));
                let span = self.hub.settled(&queue, &item.id, &item.token);
                if let Ok(o) = &result {
                    record_failure(&queue, &item, o, &session.worker_id, &span);
                }
                session.send(Outbound::Settled(Settled {
                    queue: queue.to_string(),
                    id: item.id,
                    token: item.token,
                    result: result.map(|o| Some(o.state)),
                }));
            }
        }
        Ok(())
    }

    /// Saves a validated, authorized progress report (`progress.lua`); the time saved, ms.
    async fn save_progress(
        &self,
        queue: &QueueName,
        id: &str,
        token: &str,
        report: &crate::jobs::ProgressReport,
    ) -> Result<u64, Error> {
        let r = self
            .hub
            .store()
            .report_progress(queue, id, token, report)
            .await
            .map_err(Error::from)?;
        let saved = settle_error(queue, id, r)?;
        tracing::debug!(queue = %queue, job_id = %Untrusted(id), progress = ?report.progress,
            checkpoint_bytes = report.checkpoint.as_ref().map(Vec::len), "progress saved");
        Ok(saved)
    }

    /// Reads the stream until it ends, in batches of what is already buffered. When an
    /// auth-file reload takes the principal's `worker` role on one of the stream's queues
    /// (or its credentials) away, the stream ends with that refusal and gets no more leases.
    async fn read_stream(
        self: Arc<Self>,
        session: Arc<Session>,
        principal: Principal,
        mut inbound: Streaming<pb::SubscribeRequest>,
    ) {
        let revoked = self
            .auth
            .revoked(principal.clone(), Rpc::Subscribe, session.queues.clone());
        let mut revoked = std::pin::pin!(revoked);
        let mut ended = false;
        while !ended {
            let mut batch = Vec::new();
            let mut refused = None;
            let next = async {
                // Replies the worker has not read yet bound what is read from it.
                self.hub.outbound_room(&session).await;
                inbound.next().await
            };
            let next = tokio::select! {
                next = next => next,
                e = &mut revoked => {
                    tracing::info!(worker_id = %Untrusted(&session.worker_id), principal = %principal.name, error = %Untrusted(&e.to_string()), "stream ended: its principal's access was revoked");
                    session.send(Outbound::Fatal(e));
                    break;
                }
            };
            match next {
                Some(Ok(m)) => batch.push(m),
                Some(Err(s)) => {
                    ended = true;
                    refused = inbound_refusal(s);
                }
                None => break,
            }
            while !ended && batch.len() < INBOUND_BATCH {
                match inbound.next().now_or_never() {
                    Some(Some(Ok(m))) => batch.push(m),
                    Some(Some(Err(s))) => {
                        ended = true;
                        refused = inbound_refusal(s);
                    }
                    Some(None) => ended = true,
                    None => break,
                }
            }
            self.hub.touch(&session);
            // The messages before a malformed one are handled, then the stream ends with
            // the refusal.
            let handled = self.handle_batch(&session, &principal, batch).await;
            if let Err(e) = handled.and(refused.map_or(Ok(()), Err)) {
                tracing::debug!(worker_id = %Untrusted(&session.worker_id), error = %Untrusted(&e.to_string()), "stream ended by a protocol error");
                session.send(Outbound::Fatal(e));
                break;
            }
        }
        self.hub.close_session(&session);
    }
}

/// The refusal to end a stream with when reading its next message failed: a malformed
/// message (INVALID_ARGUMENT from `codec.rs`) or an oversized one (RESOURCE_EXHAUSTED from
/// `message_size.rs`); `None` for a stream that broke (reset, cancelled).
fn inbound_refusal(s: Status) -> Option<Error> {
    let reason = s.message().to_owned();
    match s.code() {
        tonic::Code::InvalidArgument => Some(Error::invalid("message", reason)),
        tonic::Code::ResourceExhausted => Some(Error::TooLarge {
            field: "message".into(),
            reason,
        }),
        _ => None,
    }
}

fn record_ack(queue: &QueueName, id: &str, o: &AckOutcome, span: &tracing::Span) {
    if o.repeated {
        // Counted when it was applied; the worker only lost the reply.
        span.in_scope(
            || tracing::debug!(queue = %queue, job_id = %Untrusted(id), "repeated ack answered OK"),
        );
        return;
    }
    crate::metrics::completed(queue.as_str(), &o.name, o.now_ms.saturating_sub(o.lease_ms));
    span.in_scope(|| tracing::debug!(queue = %queue, job_id = %Untrusted(id), name = %Untrusted(&o.name), "acked"));
}

/// Counts and logs a failed attempt (job id, name, attempt, worker, disposition, outcome); a
/// RELEASE is logged only.
fn record_failure(
    queue: &QueueName,
    item: &FailItem,
    o: &FailOutcome,
    worker: &str,
    span: &tracing::Span,
) {
    if o.repeated {
        span.in_scope(|| tracing::debug!(queue = %queue, job_id = %Untrusted(&item.id), worker_id = %Untrusted(worker), "repeated fail answered OK"));
        return;
    }
    // A cancelled job's Fail ends it CANCELLED whatever the worker asked (DESIGN.md
    // section 13): counted as what it is, never as a retry.
    let disposition = match item.disposition {
        _ if o.state == JobState::Cancelled => "cancelled",
        Disposition::Retry => "retry",
        Disposition::NoRetry => "no_retry",
        Disposition::RateLimited => "rate_limited",
        Disposition::Release => {
            // Not a failure: the worker stopped first and the attempt is not charged (the
            // server's own drain hands leases back the same way and counts none).
            span.in_scope(|| {
                tracing::info!(queue = %queue, job_id = %Untrusted(&item.id), name = %Untrusted(&o.name), attempt = o.attempt,
                    worker_id = %Untrusted(worker), error_type = %Untrusted(&item.error_type),
                    state = o.state.as_str(), "the worker handed the job back uncharged")
            });
            return;
        }
    };
    let run_ms = o.now_ms.saturating_sub(o.lease_ms);
    crate::metrics::failed(
        queue.as_str(),
        &o.name,
        disposition,
        o.state,
        o.dead_reason,
        Some(run_ms),
    );
    if o.state == crate::jobs::JobState::Expired
        || o.dead_reason == Some(crate::jobs::DeadReason::Expired)
    {
        // Its retry would have started past its expire time: it expired instead.
        crate::metrics::expired(queue.as_str(), 1);
    }
    span.in_scope(|| {
        tracing::info!(queue = %queue, job_id = %Untrusted(&item.id), name = %Untrusted(&o.name), attempt = o.attempt,
            worker_id = %Untrusted(worker), disposition, error_type = %Untrusted(&item.error_type),
            error = %Untrusted(&item.message), state = o.state.as_str(),
            dead_reason = o.dead_reason.map(|d| d.as_str()).unwrap_or(""), "attempt failed")
    });
}

/// The Arc-wrapped service, so the stream reader task can own a handle.
pub struct WorkerService(pub Arc<WorkerApi>);

#[tonic::async_trait]
impl pb::worker_service_server::WorkerService for WorkerService {
    type SubscribeStream = SubscribeStream;

    async fn subscribe(
        &self,
        request: Request<Streaming<pb::SubscribeRequest>>,
    ) -> Result<Response<SubscribeStream>, Status> {
        let principal = self.0.auth.check(&request, Rpc::Subscribe, &[])?;
        // Counted from the start: a stream that never sends `open` holds a place too. Only
        // authenticated principals are counted as such: without --auth-file every caller is
        // the same anonymous one.
        let counted = (principal.via() != "anonymous").then(|| principal.name.clone());
        let place = self.0.streams.admit(ConnKey::of(&request), counted)?;
        let mut inbound = request.into_inner();
        // A stream silent from its start is cut at the heartbeat timeout at the latest.
        let open_timeout = OPEN_TIMEOUT.min(self.0.hub.config().heartbeat_timeout);
        let first = tokio::time::timeout(open_timeout, inbound.message())
            .await
            .map_err(|_| Error::invalid("open", "the stream sent no open message in time"))??;
        let open = match first.and_then(|m| m.message) {
            Some(In::Open(o)) => o,
            _ => return Err(Error::invalid("open", "the first message must be `open`").into()),
        };
        let (queues, credits, worker) = open_args(open)?;
        // Every queue the stream names must be granted `worker`, or none is served.
        for q in &queues {
            self.0.auth.authorize(&principal, Rpc::Subscribe, q)?;
        }
        let hub = &self.0.hub;
        if hub.is_draining() {
            return Err(Error::Unavailable("the server is shutting down".into()).into());
        }
        let (session, out) = hub.open_session(queues, credits, worker);
        // stream_id as ListWorkers shows it.
        tracing::info!(worker_id = %Untrusted(&session.worker_id), stream_id = %format!("{}/{}", hub.replica_id(), session.id), principal = %principal.name, queues = ?session.queues.iter().map(|q| q.as_str()).collect::<Vec<_>>(), credits, "worker subscribed");
        if let Some((at, grace)) = place.age_deadline() {
            tokio::spawn(hub.clone().retire_at(session.clone(), at, grace));
        }
        tokio::spawn(self.0.clone().read_stream(session, principal, inbound));
        // The place is given back when the transport drops the stream (it ended).
        let out = out.map(move |m| {
            let _place = &place;
            outbound_pb(m)
        });
        Ok(Response::new(Box::pin(out)))
    }

    #[tracing::instrument(skip_all, fields(queue, job_id))]
    async fn ack(
        &self,
        request: Request<pb::AckRequest>,
    ) -> Result<Response<pb::AckResponse>, Status> {
        let (queue, item) = ack_args(request.get_ref(), &self.0.limits)?;
        self.0.auth.check(&request, Rpc::Ack, &[&queue])?;
        let (AckItem { id, token, .. }, r) = self
            .0
            .hub
            .ack(&queue, vec![item])
            .await?
            .pop()
            .ok_or_else(|| Error::Internal("ack returned nothing".into()))?;
        // A failed call applied nothing: a stream holding the lease keeps it.
        let done = settle_error(&queue, &id, r?);
        let span = match done {
            Err(Error::JobNotFound { .. }) => tracing::Span::none(),
            _ => self.0.hub.settled(&queue, &id, &token),
        };
        record_ack(&queue, &id, &done?, &span);
        Ok(Response::new(pb::AckResponse {}))
    }

    #[tracing::instrument(skip_all, fields(queue, job_id))]
    async fn fail(
        &self,
        request: Request<pb::FailRequest>,
    ) -> Result<Response<pb::FailResponse>, Status> {
        let (queue, item) = fail_args(request.get_ref())?;
        self.0.auth.check(&request, Rpc::Fail, &[&queue])?;
        let (item, r) = self
            .0
            .hub
            .fail(&queue, vec![item])
            .await?
            .pop()
            .ok_or_else(|| Error::Internal("fail returned nothing".into()))?;
        let done = settle_error(&queue, &item.id, r?);
        let span = match done {
            Err(Error::JobNotFound { .. }) => tracing::Span::none(),
            _ => self.0.hub.settled(&queue, &item.id, &item.token),
        };
        let o = done?;
        record_failure(&queue, &item, &o, "(unary)", &span);
        Ok(Response::new(pb::FailResponse {
            state: convert::state_pb(o.state) as i32,
            ready_time: (o.state != JobState::Dead)
                .then(|| convert::timestamp(o.at_ms))
                .flatten(),
            dead_reason: convert::dead_reason_pb(o.dead_reason) as i32,
        }))
    }

    #[tracing::instrument(skip_all, fields(queue, job_id))]
    async fn report_progress(
        &self,
        request: Request<pb::ReportProgressRequest>,
    ) -> Result<Response<pb::ReportProgressResponse>, Status> {
        let queue = convert::queue("queue", &request.get_ref().queue)?;
        self.0
            .auth
            .check(&request, Rpc::ReportProgress, &[&queue])?;
        let (queue, id, token, report) = progress_args(request.into_inner(), &self.0.limits)?;
        self.0.save_progress(&queue, &id, &token, &report).await?;
        Ok(Response::new(pb::ReportProgressResponse {}))
    }

    #[tracing::instrument(skip_all, fields(queue, job_id))]
    async fn extend_lease(
        &self,
        request: Request<pb::ExtendLeaseRequest>,
    ) -> Result<Response<pb::ExtendLeaseResponse>, Status> {
        let r = request.get_ref();
        let queue = convert::queue("queue", &r.queue)?;
        let id = convert::job_id("job_id", &r.job_id)?;
        let token = convert::token("lease_token", &r.lease_token)?;
        self.0.auth.check(&request, Rpc::ExtendLease, &[&queue])?;
        let default_ms = self.0.hub.config().lease_duration.as_millis() as u64;
        let ms = convert::duration_ms(
            "lease_duration",
            r.lease_duration.as_ref(),
            *EXTEND_RANGE_MS.end(),
        )?
        .unwrap_or(default_ms);
        if !EXTEND_RANGE_MS.contains(&ms) {
            return Err(Error::invalid(
                "lease_duration",
                format!("is {ms} ms, must be 1 s to 1 h"),
            )
            .into());
        }
        let res = self
            .0
            .hub
            .store()
            .renew(&queue, &[(id.clone(), token)], ms, true)
            .await
            .map_err(Error::from)?;
        let res = res
            .into_iter()
            .next()
            .ok_or_else(|| Error::Internal("renew returned nothing".into()))?;
        let renewed = settle_error(&queue, &id, res)?;
        Ok(Response::new(pb::ExtendLeaseResponse {
            lease_deadline: convert::timestamp(renewed.deadline_ms),
        }))
    }
}
