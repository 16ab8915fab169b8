//! A worker's stream as the lease machinery sees it: free credits, the leases it holds, when
//! it was last heard from, and the channel to its outbound half.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::mpsc;

use crate::jobs::{LeasedJob, QueueName};

/// Most credits one stream may hold at once.
pub const MAX_CREDITS: i64 = 10_000;

/// What the server sends down a stream; the api layer turns it into protobuf.
#[derive(Debug)]
pub enum Outbound {
    /// A leased job.
    Lease(Box<LeasedJob>),
    /// The outcome of an Ack or Fail sent on the stream.
    Settled(Settled),
    /// The server is shutting down and will hand leases back after `grace`.
    Draining(Duration),
    /// The stream is ended with this error (a protocol violation by the worker).
    Fatal(crate::Error),
}

/// The outcome of a settle sent on the stream.
#[derive(Debug)]
pub struct Settled {
    /// The job's queue.
    pub queue: String,
    /// The job id.
    pub id: String,
    /// The token presented.
    pub token: String,
    /// Ok(new state name) or the error.
    pub result: Result<Option<crate::jobs::JobState>, crate::Error>,
}

/// A lease this stream holds.
#[derive(Debug, Clone)]
pub(crate) struct Held {
    pub(crate) token: String,
    /// The renewal saw the lease taken over: stop renewing it.
    pub(crate) lost: bool,
    /// The attempt's span (queue, job id, name, attempt, worker id, trace id): settle
    /// events are logged inside it.
    pub(crate) span: tracing::Span,
}

/// One worker stream.
#[derive(Debug)]
pub struct Session {
    /// Unique within this replica.
    pub id: u64,
    /// The worker's name (for logs and attempt records).
    pub worker_id: String,
    /// The queues it leases from.
    pub queues: Vec<QueueName>,
    pub(crate) credits: AtomicI64,
    pub(crate) held: Mutex<HashMap<(QueueName, String), Held>>,
    last_seen_ms: AtomicU64,
    pub(crate) closed: AtomicBool,
    pub(crate) draining: AtomicBool,
    /// Index into `queues` of the queue whose turn it is to use a credit (fairness).
    turn: AtomicUsize,
    tx: Mutex<Option<mpsc::UnboundedSender<Outbound>>>,
}

impl Session {
    pub(crate) fn new(
        id: u64,
        worker_id: String,
        queues: Vec<QueueName>,
        credits: u32,
        now_ms: u64,
    ) -> (Session, mpsc::UnboundedReceiver<Outbound>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let session = Session {
            id,
            worker_id,
            queues,
            credits: AtomicI64::new(i64::from(credits).min(MAX_CREDITS)),
            held: Mutex::new(HashMap::new()),
            last_seen_ms: AtomicU64::new(now_ms),
            closed: AtomicBool::new(false),
            draining: AtomicBool::new(false),
            turn: AtomicUsize::new(0),
            tx: Mutex::new(Some(tx)),
        };
        (session, rx)
    }

    /// Sends a message down the stream; false when the stream is gone.
    pub fn send(&self, msg: Outbound) -> bool {
        match self.tx.lock() {
            Ok(tx) => tx.as_ref().is_some_and(|tx| tx.send(msg).is_ok()),
            Err(_) => false,
        }
    }

    /// Ends the outbound half: the worker's stream closes once it has read what is queued.
    pub(crate) fn close_outbound(&self) {
        if let Ok(mut tx) = self.tx.lock() {
            tx.take();
        }
    }

    /// Records that the worker was heard from at `now_ms`.
    pub(crate) fn touch(&self, now_ms: u64) {
        self.last_seen_ms.store(now_ms, Ordering::Relaxed);
    }

    /// The stream is open, not draining, and was heard from within `heartbeat_timeout`.
    pub(crate) fn alive(&self, now_ms: u64, heartbeat_timeout: Duration) -> bool {
        !self.closed.load(Ordering::Relaxed)
            && now_ms.saturating_sub(self.last_seen_ms.load(Ordering::Relaxed))
                <= heartbeat_timeout.as_millis() as u64
    }

    /// May the lease loop give this stream a job now?
    pub(crate) fn wants_leases(&self) -> bool {
        !self.closed.load(Ordering::Relaxed)
            && !self.draining.load(Ordering::Relaxed)
            && self.credits.load(Ordering::Relaxed) > 0
    }

    /// Takes one credit if there is one.
    pub(crate) fn take_credit(&self) -> bool {
        self.credits
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |c| {
                (c > 0).then_some(c - 1)
            })
            .is_ok()
    }

    /// Takes one credit for `queue` if it is that queue's turn: a stream on several queues
    /// serves them round-robin, skipping queues that have nothing leasable right now
    /// (`backlog` says which do), so a busy queue cannot starve another.
    pub(crate) fn take_credit_for(
        &self,
        queue: &QueueName,
        backlog: impl Fn(&QueueName) -> bool,
    ) -> bool {
        let n = self.queues.len();
        if n <= 1 {
            return self.take_credit();
        }
        let t = self.turn.load(Ordering::Acquire);
        for k in 0..n {
            let candidate = &self.queues[(t + k) % n];
            if candidate == queue {
                if !self.take_credit() {
                    return false;
                }
                self.turn.store((t + k + 1) % n, Ordering::Release);
                return true;
            }
            if backlog(candidate) {
                return false;
            }
        }
        false
    }

    /// Gives credits back (capped at [`MAX_CREDITS`]).
    pub(crate) fn add_credits(&self, n: i64) {
        let _ = self
            .credits
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |c| {
                Some((c + n).min(MAX_CREDITS))
            });
    }

    /// Records a lease this stream now holds.
    pub(crate) fn hold(&self, queue: &QueueName, id: &str, token: &str, span: tracing::Span) {
        if let Ok(mut held) = self.held.lock() {
            held.insert(
                (queue.clone(), id.to_owned()),
                Held {
                    token: token.to_owned(),
                    lost: false,
                    span,
                },
            );
        }
    }

    /// Forgets a lease the worker settled; `Some` if this stream held it (a credit is due).
    pub(crate) fn forget(&self, queue: &QueueName, id: &str) -> Option<Held> {
        self.held
            .lock()
            .ok()
            .and_then(|mut h| h.remove(&(queue.clone(), id.to_owned())))
    }

    /// Forgets a settled lease if this stream holds it under `token`; `Some` if so (a
    /// credit is due).
    pub(crate) fn forget_token(&self, queue: &QueueName, id: &str, token: &str) -> Option<Held> {
        let mut held = self.held.lock().ok()?;
        let key = (queue.clone(), id.to_owned());
        if held.get(&key).is_some_and(|h| h.token == token) {
            return held.remove(&key);
        }
        None
    }

    /// How many leases it holds.
    pub fn held_count(&self) -> usize {
        self.held.lock().map(|h| h.len()).unwrap_or(0)
    }
}
