//! [`WakeListener`]: the subscription side of the queues' wake-up channels (the scripts
//! publish on them, `scripts/common.lua`), over whichever backend the store has.
//!
//! - One Redis or Sentinel: a RESP2 pub/sub connection to the current master, SUBSCRIBE to
//!   `jw:wake:<queue>` per queue. When the store's connection is replaced (a replica or,
//!   behind Sentinel, a dead or demoted master was found), [`WakeEvent::Moved`] asks the
//!   caller to make a new listener: the new master's messages never reach the old one.
//! - Redis Cluster: a RESP3 cluster connection with a push channel, SSUBSCRIBE to
//!   `jw:{<queue>}:wake` per queue (sharded pub/sub, on the master of the queue's slot).
//!   redis-rs (1.8) forgets a sharded subscription for good when the server ends it, which
//!   Redis does when the slot moves (`CLUSTER FAILOVER`, a master's death: it pushes
//!   SUNSUBSCRIBE). So the listener subscribes again (routed by the new slot map) when such a
//!   push arrives for a queue it still wants, when a node connection drops (the library's
//!   Disconnection push), and for every wanted queue every [`RESUBSCRIBE_EVERY`]; a failed
//!   subscription is tried again every [`RETRY_EVERY`]. The caller keeps its safety poll for
//!   what falls between.

use std::collections::BTreeSet;
use std::time::Duration;

use futures::StreamExt;
use redis::cluster_async::ClusterConnection;
use redis::{PushInfo, PushKind, Value};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::keys::{shard_wake_channel, wake_channel, wake_queue};
use super::{CancelNotice, Store, StoreError};
use crate::jobs::QueueName;

/// How often every wanted sharded subscription is made again (a lost one without any push
/// is restored within this).
pub const RESUBSCRIBE_EVERY: Duration = Duration::from_secs(5);
/// How soon a failed sharded subscription (its master down, its slot moving) is tried again.
pub const RETRY_EVERY: Duration = Duration::from_millis(250);

/// What the listener heard.
#[derive(Debug, PartialEq)]
pub enum WakeEvent {
    /// A job of the queue became ready (a script published on its channel).
    Ready(QueueName),
    /// A leased job of the queue was cancelled (`cancel.lua` published a
    /// [`CancelNotice`]): the stream holding its lease is to be told.
    Cancel(QueueName, CancelNotice),
    /// The queues' subscriptions were lost and are made again: messages published meanwhile
    /// are lost, so their loops should look for work.
    Resubscribed(Vec<QueueName>),
    /// The master moved (the store connected elsewhere): make a new listener now.
    Moved,
}

/// A subscription to the wake-up channels of chosen queues (see the module doc).
pub struct WakeListener {
    inner: Inner,
}

enum Inner {
    Direct {
        sink: redis::aio::PubSubSink,
        stream: redis::aio::PubSubStream,
        replaced: tokio::sync::watch::Receiver<u64>,
    },
    Cluster(Box<Sharded>),
}

struct Sharded {
    conn: ClusterConnection,
    pushes: mpsc::UnboundedReceiver<PushInfo>,
    /// Queues subscribed to (or to be).
    wanted: BTreeSet<QueueName>,
    /// Wanted queues whose subscription must be made (again), and whether their messages
    /// may have been lost (then they are reported once subscribed).
    pending: Vec<(QueueName, bool)>,
    /// When `pending` is tried next.
    retry_at: Instant,
    /// When every wanted queue is subscribed again.
    refresh_at: Instant,
}

impl Store {
    /// A new wake-up listener on the store's backend (subscribed to nothing yet). Errors:
    /// the master or the cluster cannot be reached ([`StoreError::Unavailable`]).
    pub async fn wake_listener(&self) -> Result<WakeListener, StoreError> {
        if let Some(cluster) = self.conn.cluster() {
            let (tx, pushes) = mpsc::unbounded_channel();
            let conn = cluster
                .builder()
                .use_protocol(redis::ProtocolVersion::RESP3)
                .push_sender(tx)
                .build()?
                .get_async_connection()
                .await?;
            let now = Instant::now();
            return Ok(WakeListener {
                inner: Inner::Cluster(Box::new(Sharded {
                    conn,
                    pushes,
                    wanted: BTreeSet::new(),
                    pending: Vec::new(),
                    retry_at: now,
                    refresh_at: now + RESUBSCRIBE_EVERY,
                })),
            });
        }
        let mut replaced = self.conn.replacements();
        replaced.borrow_and_update();
        let client = match self.conn.direct_client().await {
            Some(c) => c?,
            None => unreachable!("a store is direct or a cluster"),
        };
        let (sink, stream) = client.get_async_pubsub().await?.split();
        Ok(WakeListener {
            inner: Inner::Direct {
                sink,
                stream,
                replaced,
            },
        })
    }
}

impl WakeListener {
    /// Subscribes to `queue`'s wake-ups. Returns true when the subscription has taken
    /// effect (Redis answered it: every PUBLISH it runs from now on reaches the listener).
    /// On a cluster a failure is not an error but false: the subscription is tried again
    /// shortly (and reported as [`WakeEvent::Resubscribed`] once in effect).
    pub async fn subscribe(&mut self, queue: &QueueName) -> Result<bool, StoreError> {
        match &mut self.inner {
            Inner::Direct { sink, .. } => {
                sink.subscribe(wake_channel(queue)).await?;
                Ok(true)
            }
            Inner::Cluster(s) => {
                s.wanted.insert(queue.clone());
                if let Err(e) = s.conn.ssubscribe(shard_wake_channel(queue)).await {
                    tracing::debug!(queue = %queue, error = %e, "ssubscribe failed; retrying");
                    s.pending.push((queue.clone(), true));
                    return Ok(false);
                }
                Ok(true)
            }
        }
    }

    /// Ends the subscription to `queue`'s wake-ups.
    pub async fn unsubscribe(&mut self, queue: &QueueName) -> Result<(), StoreError> {
        match &mut self.inner {
            Inner::Direct { sink, .. } => Ok(sink.unsubscribe(wake_channel(queue)).await?),
            Inner::Cluster(s) => {
                s.wanted.remove(queue);
                s.pending.retain(|(q, _)| q != queue);
                if let Err(e) = s.conn.sunsubscribe(shard_wake_channel(queue)).await {
                    tracing::debug!(queue = %queue, error = %e, "sunsubscribe failed");
                }
                Ok(())
            }
        }
    }

    /// The next event; `None` when the connection is gone (make a new listener after a
    /// pause). Cancel-safe: a subscription interrupted by a cancel is made again later.
    pub async fn next(&mut self) -> Option<WakeEvent> {
        match &mut self.inner {
            Inner::Direct {
                stream, replaced, ..
            } => loop {
                tokio::select! {
                    msg = stream.next() => {
                        let msg = msg?;
                        if let Some(q) = wake_queue(msg.get_channel_name()) {
                            return Some(event(q, msg.get_payload_bytes()));
                        }
                    }
                    Ok(()) = replaced.changed() => return Some(WakeEvent::Moved),
                }
            },
            Inner::Cluster(s) => s.next().await,
        }
    }
}

/// The channel name of a push (its first value).
/// The event of a message on `queue`'s wake channel: a cancel notice or a wake-up.
fn event(queue: QueueName, payload: &[u8]) -> WakeEvent {
    match CancelNotice::parse(payload) {
        Some(n) => WakeEvent::Cancel(queue, n),
        None => WakeEvent::Ready(queue),
    }
}

fn push_channel(push: &PushInfo) -> Option<String> {
    match push.data.first()? {
        Value::BulkString(b) => String::from_utf8(b.clone()).ok(),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    }
}

impl Sharded {
    async fn next(&mut self) -> Option<WakeEvent> {
        loop {
            let now = Instant::now();
            if now >= self.refresh_at {
                self.refresh_at = now + RESUBSCRIBE_EVERY;
                for q in &self.wanted {
                    if !self.pending.iter().any(|(p, _)| p == q) {
                        self.pending.push((q.clone(), false));
                    }
                }
            }
            if !self.pending.is_empty() && now >= self.retry_at {
                if let Some(lost) = self.resubscribe().await {
                    return Some(WakeEvent::Resubscribed(lost));
                }
            }
            let wait_until = if self.pending.is_empty() {
                self.refresh_at
            } else {
                self.retry_at.min(self.refresh_at)
            };
            tokio::select! {
                push = self.pushes.recv() => {
                    let push = push?;
                    match push.kind {
                        PushKind::SMessage => {
                            if let Some(q) = push_channel(&push).as_deref().and_then(wake_queue) {
                                let payload = match push.data.get(1) {
                                    Some(Value::BulkString(b)) => b.as_slice(),
                                    _ => b"1".as_slice(),
                                };
                                return Some(event(q, payload));
                            }
                        }
                        // The server ended a subscription (its slot moved away from the
                        // node): make it again if the queue is still wanted.
                        PushKind::SUnsubscribe => {
                            if let Some(q) = push_channel(&push).as_deref().and_then(wake_queue) {
                                if self.wanted.contains(&q) {
                                    tracing::debug!(queue = %q, "sharded subscription ended by the server; subscribing again");
                                    self.mark_lost(q);
                                    self.retry_at = Instant::now();
                                }
                            }
                        }
                        // A node connection dropped: its subscriptions and messages are gone.
                        PushKind::Disconnection => {
                            let all: Vec<QueueName> = self.wanted.iter().cloned().collect();
                            for q in all {
                                self.mark_lost(q);
                            }
                            self.retry_at = Instant::now();
                        }
                        _ => {}
                    }
                }
                _ = tokio::time::sleep_until(wait_until) => {}
            }
        }
    }

    fn mark_lost(&mut self, q: QueueName) {
        match self.pending.iter_mut().find(|(p, _)| *p == q) {
            Some((_, lost)) => *lost = true,
            None => self.pending.push((q, true)),
        }
    }

    /// Subscribes the pending queues again (those that fail are tried after
    /// [`RETRY_EVERY`]); returns those whose messages may have been lost, if any.
    async fn resubscribe(&mut self) -> Option<Vec<QueueName>> {
        let mut lost = Vec::new();
        let mut i = 0;
        while let Some((q, was_lost)) = self.pending.get(i).cloned() {
            match self.conn.ssubscribe(shard_wake_channel(&q)).await {
                Ok(()) => {
                    self.pending.remove(i);
                    if was_lost {
                        lost.push(q);
                    }
                }
                Err(e) => {
                    tracing::debug!(queue = %q, error = %e, "ssubscribe failed; retrying");
                    i += 1;
                }
            }
        }
        self.retry_at = Instant::now() + RETRY_EVERY;
        (!lost.is_empty()).then_some(lost)
    }
}
