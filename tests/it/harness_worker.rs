//! The worker side of the test harness: [`TestWorker`], a Subscribe stream driven by hand
//! (open, read leases, settles and progress replies, ack, fail, heartbeat, report progress),
//! and [`Recv`], what one read saw.

use std::time::Duration;

use jobwire::pb;
use jobwire::pb::worker_service_client::WorkerServiceClient;
use tokio::sync::mpsc;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tonic::transport::Channel;
use tonic::Streaming;

use super::{ms, TestApp};

/// What [`TestWorker::recv`] saw.
#[derive(Debug)]
#[allow(clippy::large_enum_variant)]
pub enum Recv {
    Msg(Out),
    End,
    Error(tonic::Status),
    Timeout,
}

/// A worker holding a Subscribe stream.
pub struct TestWorker {
    tx: mpsc::UnboundedSender<pb::SubscribeRequest>,
    rx: Streaming<pb::SubscribeResponse>,
    /// Settled messages read while waiting for leases, and vice versa.
    pending_leases: Vec<pb::Lease>,
    pending_settled: Vec<pb::Settled>,
    pending_progress: Vec<pb::ProgressSaved>,
    /// CancelLease messages read while waiting for something else.
    pending_cancels: Vec<pb::CancelLease>,
}

use pb::subscribe_request::Message as In;
use pb::subscribe_response::Message as Out;

impl TestWorker {
    pub async fn open(app: &TestApp, queues: &[&str], credits: u32, worker_id: &str) -> TestWorker {
        TestWorker::open_on(app.channel.clone(), queues, credits, worker_id).await
    }

    /// Opens a stream on any server's channel (e.g. a jobwire child process).
    pub async fn open_on(
        channel: Channel,
        queues: &[&str],
        credits: u32,
        worker_id: &str,
    ) -> TestWorker {
        let (tx, rx) = mpsc::unbounded_channel();
        tx.send(pb::SubscribeRequest {
            message: Some(In::Open(pb::OpenStream {
                queues: queues.iter().map(|q| q.to_string()).collect(),
                credits,
                worker_id: worker_id.into(),
            })),
        })
        .expect("send");
        let rx = WorkerServiceClient::new(channel)
            .subscribe(UnboundedReceiverStream::new(rx))
            .await
            .expect("subscribe")
            .into_inner();
        TestWorker {
            tx,
            rx,
            pending_leases: Vec::new(),
            pending_settled: Vec::new(),
            pending_progress: Vec::new(),
            pending_cancels: Vec::new(),
        }
    }

    pub fn send(&self, m: In) {
        self.tx
            .send(pb::SubscribeRequest { message: Some(m) })
            .expect("stream open");
    }

    /// Sends a heartbeat; false when the stream is gone.
    pub fn heartbeat(&self) -> bool {
        self.tx
            .send(pb::SubscribeRequest {
                message: Some(In::Heartbeat(pb::Heartbeat {})),
            })
            .is_ok()
    }

    /// Reads until `Draining` arrives, each message within `patience` (others are dropped);
    /// panics when the stream ends or goes quiet first.
    pub async fn until_draining(&mut self, patience: Duration) {
        loop {
            match self.recv(patience).await {
                Recv::Msg(Out::Draining(_)) => return,
                Recv::Msg(_) => continue,
                other => panic!("no Draining: {other:?}"),
            }
        }
    }

    /// The next message, without panicking on the end of the stream or an error status.
    pub async fn recv(&mut self, patience: Duration) -> Recv {
        match tokio::time::timeout(patience, self.rx.message()).await {
            Ok(Ok(Some(m))) => m.message.map_or(Recv::End, Recv::Msg),
            Ok(Ok(None)) => Recv::End,
            Ok(Err(status)) => Recv::Error(status),
            Err(_) => Recv::Timeout,
        }
    }

    /// Heartbeats every 200 ms for `period`, collecting any leases that arrive meanwhile
    /// (a busy worker that keeps its stream alive).
    pub async fn heartbeat_for(&mut self, period: Duration) -> Vec<pb::Lease> {
        let deadline = tokio::time::Instant::now() + period;
        let mut leases = Vec::new();
        while tokio::time::Instant::now() < deadline {
            self.send(In::Heartbeat(pb::Heartbeat {}));
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if let Some(l) = self
                .lease_within(left.min(Duration::from_millis(200)))
                .await
            {
                leases.push(l);
            }
        }
        leases
    }

    async fn read(&mut self, patience: Duration) -> Option<Out> {
        match tokio::time::timeout(patience, self.rx.message()).await {
            Ok(Ok(Some(m))) => m.message,
            Ok(Ok(None)) => None,
            Ok(Err(status)) => panic!("stream error: {status:?}"),
            Err(_) => None,
        }
    }

    /// The next lease within `patience`, or None.
    pub async fn lease_within(&mut self, patience: Duration) -> Option<pb::Lease> {
        if !self.pending_leases.is_empty() {
            return Some(self.pending_leases.remove(0));
        }
        let deadline = tokio::time::Instant::now() + patience;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            match self.read(left).await? {
                Out::Lease(l) => return Some(l),
                Out::Settled(s) => self.pending_settled.push(s),
                Out::ProgressSaved(p) => self.pending_progress.push(p),
                Out::Cancel(c) => self.pending_cancels.push(c),
                Out::Draining(_) => {}
            }
        }
    }

    pub async fn lease(&mut self) -> pb::Lease {
        self.lease_within(Duration::from_secs(10))
            .await
            .expect("a lease within 10 s")
    }

    pub async fn settled(&mut self) -> pb::Settled {
        if !self.pending_settled.is_empty() {
            return self.pending_settled.remove(0);
        }
        loop {
            match self
                .read(Duration::from_secs(10))
                .await
                .expect("a settled within 10 s")
            {
                Out::Settled(s) => return s,
                Out::Lease(l) => self.pending_leases.push(l),
                Out::ProgressSaved(p) => self.pending_progress.push(p),
                Out::Cancel(c) => self.pending_cancels.push(c),
                Out::Draining(_) => {}
            }
        }
    }

    /// The next CancelLease within `patience` (leases, settles and progress replies read
    /// meanwhile are kept for later), or None.
    pub async fn cancel_within(&mut self, patience: Duration) -> Option<pb::CancelLease> {
        if !self.pending_cancels.is_empty() {
            return Some(self.pending_cancels.remove(0));
        }
        let deadline = tokio::time::Instant::now() + patience;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            match self.read(left).await? {
                Out::Cancel(c) => return Some(c),
                Out::Lease(l) => self.pending_leases.push(l),
                Out::Settled(s) => self.pending_settled.push(s),
                Out::ProgressSaved(p) => self.pending_progress.push(p),
                Out::Draining(_) => {}
            }
        }
    }

    /// The next ProgressSaved (a reply to a progress report on this stream).
    pub async fn progress_saved(&mut self) -> pb::ProgressSaved {
        if !self.pending_progress.is_empty() {
            return self.pending_progress.remove(0);
        }
        loop {
            match self
                .read(Duration::from_secs(10))
                .await
                .expect("a progress_saved within 10 s")
            {
                Out::ProgressSaved(p) => return p,
                Out::Lease(l) => self.pending_leases.push(l),
                Out::Settled(s) => self.pending_settled.push(s),
                Out::Cancel(c) => self.pending_cancels.push(c),
                Out::Draining(_) => {}
            }
        }
    }

    /// Sends a progress report for the job of `l` (its queue, id and token) and returns
    /// the server's ProgressSaved.
    pub async fn report(
        &mut self,
        l: &pb::Lease,
        progress: Option<u32>,
        message: Option<&str>,
        checkpoint: Option<&[u8]>,
    ) -> pb::ProgressSaved {
        let job = l.job.as_ref().expect("job");
        self.send(In::Progress(pb::ReportProgressRequest {
            queue: job.queue.clone(),
            job_id: job.job_id.clone(),
            lease_token: l.lease_token.clone(),
            progress,
            message: message.map(str::to_owned),
            checkpoint: checkpoint.map(<[u8]>::to_vec),
        }));
        self.progress_saved().await
    }

    /// Acks the job of `l` on the stream with `result` attached.
    pub async fn ack_with(&mut self, l: &pb::Lease, result: &[u8]) -> pb::Settled {
        let job = l.job.as_ref().expect("job");
        self.send(In::Ack(pb::AckRequest {
            result: result.to_vec(),
            queue: job.queue.clone(),
            job_id: job.job_id.clone(),
            lease_token: l.lease_token.clone(),
        }));
        self.settled().await
    }

    /// Reads until the server ends the stream or `patience` passes; returns what came.
    pub async fn drain_messages(&mut self, patience: Duration) -> Vec<Out> {
        let mut out = Vec::new();
        while let Some(m) = self.read(patience).await {
            out.push(m);
        }
        out
    }

    /// Leases `n` jobs, acks them all on the stream, and waits for every ack to be applied.
    pub async fn ack_all(&mut self, n: usize) {
        for _ in 0..n {
            let l = self.lease().await;
            let job = l.job.as_ref().expect("job");
            self.send(In::Ack(pb::AckRequest {
                result: Vec::new(),
                queue: job.queue.clone(),
                job_id: job.job_id.clone(),
                lease_token: l.lease_token.clone(),
            }));
        }
        for _ in 0..n {
            assert_eq!(self.settled().await.code, 0);
        }
    }

    pub async fn ack(&mut self, l: &pb::Lease) -> pb::Settled {
        let job = l.job.as_ref().expect("job");
        self.send(In::Ack(pb::AckRequest {
            result: Vec::new(),
            queue: job.queue.clone(),
            job_id: job.job_id.clone(),
            lease_token: l.lease_token.clone(),
        }));
        self.settled().await
    }

    pub async fn fail(
        &mut self,
        l: &pb::Lease,
        disposition: pb::FailDisposition,
        message: &str,
        error_type: &str,
        retry_after: Option<Duration>,
    ) -> pb::Settled {
        let job = l.job.as_ref().expect("job");
        self.send(In::Fail(pb::FailRequest {
            pause_group: false,
            queue: job.queue.clone(),
            job_id: job.job_id.clone(),
            lease_token: l.lease_token.clone(),
            disposition: disposition as i32,
            error: Some(pb::JobError {
                message: message.into(),
                error_type: error_type.into(),
                details: String::new(),
            }),
            retry_after: retry_after.map(ms),
            pause_queue: false,
        }));
        self.settled().await
    }
}
