//! Who may call what: roles, the RPCs each role allows, queue patterns, and the policy built
//! from the auth file. Deny by default: a call is allowed only when one of the principal's
//! grants matches the queue and holds a role that allows the RPC.
//!
//! The roles follow the split that Temporal (reader/writer/worker/admin per namespace), SQS
//! and Pub/Sub (publisher/subscriber/admin per queue or topic) make; the patterns are NATS
//! and Kafka's prefix allow lists.

use std::collections::HashMap;
use std::fmt;

use super::token::SecretHash;
use crate::jobs::QueueName;

/// A role, granted per queue pattern.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Enqueue, EnqueueBatch, GetJob.
    Producer,
    /// Subscribe, Ack, Fail, ExtendLease, ReportProgress.
    Worker,
    /// Every read: GetJob, ListJobs, ListQueues, GetQueueStats, GetQueueConfig, ListWorkers,
    /// ListDeadLetters, GetDeadLetter, ListGroups, GetGroup.
    Viewer,
    /// viewer + PauseQueue, ResumeQueue, UpdateQueueConfig, PurgeQueue, DeleteQueue,
    /// ReplayDeadLetters, DeleteDeadLetters, UpdateGroupConfig, PauseGroup, ResumeGroup.
    Admin,
}

impl Role {
    /// Every role, in the order the README's table lists them.
    pub const ALL: [Role; 4] = [Role::Producer, Role::Worker, Role::Viewer, Role::Admin];

    /// The role's name in the auth file.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Producer => "producer",
            Role::Worker => "worker",
            Role::Viewer => "viewer",
            Role::Admin => "admin",
        }
    }

    fn bit(self) -> u8 {
        1 << self as u8
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Every RPC of the four jobwire services that authorization decides on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Rpc {
    /// JobService.Enqueue.
    Enqueue,
    /// JobService.EnqueueBatch.
    EnqueueBatch,
    /// JobService.GetJob.
    GetJob,
    /// JobService.ListJobs.
    ListJobs,
    /// JobService.CancelJob.
    CancelJob,
    /// JobService.CancelJobs.
    CancelJobs,
    /// JobService.DeleteJob.
    DeleteJob,
    /// WorkerService.Subscribe (and the Acks and Fails sent on the stream).
    Subscribe,
    /// WorkerService.Ack.
    Ack,
    /// WorkerService.Fail.
    Fail,
    /// WorkerService.ExtendLease.
    ExtendLease,
    /// WorkerService.ReportProgress (and the progress reports sent on a stream).
    ReportProgress,
    /// DeadLetterService.ListDeadLetters.
    ListDeadLetters,
    /// DeadLetterService.GetDeadLetter.
    GetDeadLetter,
    /// DeadLetterService.ReplayDeadLetters.
    ReplayDeadLetters,
    /// DeadLetterService.DeleteDeadLetters.
    DeleteDeadLetters,
    /// QueueService.ListQueues.
    ListQueues,
    /// QueueService.GetQueueStats.
    GetQueueStats,
    /// QueueService.PauseQueue.
    PauseQueue,
    /// QueueService.ResumeQueue.
    ResumeQueue,
    /// QueueService.GetQueueConfig.
    GetQueueConfig,
    /// QueueService.UpdateQueueConfig.
    UpdateQueueConfig,
    /// QueueService.PurgeQueue.
    PurgeQueue,
    /// QueueService.DeleteQueue.
    DeleteQueue,
    /// QueueService.ListWorkers.
    ListWorkers,
    /// GroupService.ListGroups.
    ListGroups,
    /// GroupService.GetGroup.
    GetGroup,
    /// GroupService.UpdateGroupConfig.
    UpdateGroupConfig,
    /// GroupService.PauseGroup.
    PauseGroup,
    /// GroupService.ResumeGroup.
    ResumeGroup,
}

impl Rpc {
    /// Every RPC, service by service.
    pub const ALL: [Rpc; 30] = [
        Rpc::Enqueue,
        Rpc::EnqueueBatch,
        Rpc::GetJob,
        Rpc::ListJobs,
        Rpc::CancelJob,
        Rpc::CancelJobs,
        Rpc::DeleteJob,
        Rpc::Subscribe,
        Rpc::Ack,
        Rpc::Fail,
        Rpc::ExtendLease,
        Rpc::ReportProgress,
        Rpc::ListDeadLetters,
        Rpc::GetDeadLetter,
        Rpc::ReplayDeadLetters,
        Rpc::DeleteDeadLetters,
        Rpc::ListQueues,
        Rpc::GetQueueStats,
        Rpc::PauseQueue,
        Rpc::ResumeQueue,
        Rpc::GetQueueConfig,
        Rpc::UpdateQueueConfig,
        Rpc::PurgeQueue,
        Rpc::DeleteQueue,
        Rpc::ListWorkers,
        Rpc::ListGroups,
        Rpc::GetGroup,
        Rpc::UpdateGroupConfig,
        Rpc::PauseGroup,
        Rpc::ResumeGroup,
    ];

    /// The roles that allow this RPC (any one of them is enough).
    pub fn roles(self) -> &'static [Role] {
        use Role::*;
        match self {
            Rpc::Enqueue | Rpc::EnqueueBatch => &[Producer],
            Rpc::GetJob => &[Producer, Viewer, Admin],
            // A producer withdraws its own jobs; an operator may too. Deleting a job (its
            // history gone, its id free) is an operator's.
            Rpc::CancelJob | Rpc::CancelJobs => &[Producer, Admin],
            Rpc::DeleteJob => &[Admin],
            Rpc::Subscribe | Rpc::Ack | Rpc::Fail | Rpc::ExtendLease | Rpc::ReportProgress => {
                &[Worker]
            }
            Rpc::ListJobs
            | Rpc::ListDeadLetters
            | Rpc::GetDeadLetter
            | Rpc::ListQueues
            | Rpc::ListWorkers
            | Rpc::GetQueueStats
            | Rpc::GetQueueConfig
            | Rpc::ListGroups
            | Rpc::GetGroup => &[Viewer, Admin],
            Rpc::ReplayDeadLetters
            | Rpc::DeleteDeadLetters
            | Rpc::PauseQueue
            | Rpc::ResumeQueue
            | Rpc::UpdateQueueConfig
            | Rpc::PurgeQueue
            | Rpc::DeleteQueue
            | Rpc::UpdateGroupConfig
            | Rpc::PauseGroup
            | Rpc::ResumeGroup => &[Admin],
        }
    }

    /// The RPC's name as in the proto (`Enqueue`, `ReplayDeadLetters`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Rpc::Enqueue => "Enqueue",
            Rpc::EnqueueBatch => "EnqueueBatch",
            Rpc::GetJob => "GetJob",
            Rpc::ListJobs => "ListJobs",
            Rpc::CancelJob => "CancelJob",
            Rpc::CancelJobs => "CancelJobs",
            Rpc::DeleteJob => "DeleteJob",
            Rpc::Subscribe => "Subscribe",
            Rpc::Ack => "Ack",
            Rpc::Fail => "Fail",
            Rpc::ExtendLease => "ExtendLease",
            Rpc::ReportProgress => "ReportProgress",
            Rpc::ListDeadLetters => "ListDeadLetters",
            Rpc::GetDeadLetter => "GetDeadLetter",
            Rpc::ReplayDeadLetters => "ReplayDeadLetters",
            Rpc::DeleteDeadLetters => "DeleteDeadLetters",
            Rpc::ListQueues => "ListQueues",
            Rpc::GetQueueStats => "GetQueueStats",
            Rpc::PauseQueue => "PauseQueue",
            Rpc::ResumeQueue => "ResumeQueue",
            Rpc::GetQueueConfig => "GetQueueConfig",
            Rpc::UpdateQueueConfig => "UpdateQueueConfig",
            Rpc::PurgeQueue => "PurgeQueue",
            Rpc::DeleteQueue => "DeleteQueue",
            Rpc::ListWorkers => "ListWorkers",
            Rpc::ListGroups => "ListGroups",
            Rpc::GetGroup => "GetGroup",
            Rpc::UpdateGroupConfig => "UpdateGroupConfig",
            Rpc::PauseGroup => "PauseGroup",
            Rpc::ResumeGroup => "ResumeGroup",
        }
    }

    /// The roles that allow it, as the refusal names them: `producer`, `viewer or admin`.
    pub fn roles_text(self) -> String {
        let names: Vec<&str> = self.roles().iter().map(|r| r.as_str()).collect();
        match names.split_last() {
            Some((last, [])) => (*last).to_owned(),
            Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
            None => String::new(),
        }
    }
}

/// A set of roles.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Roles(u8);

impl Roles {
    /// The set of `roles`.
    pub fn of(roles: &[Role]) -> Roles {
        Roles(roles.iter().fold(0, |acc, r| acc | r.bit()))
    }

    /// Does the set hold `role`?
    pub fn has(self, role: Role) -> bool {
        self.0 & role.bit() != 0
    }

    /// Does the set hold a role that allows `rpc`?
    pub fn allows(self, rpc: Rpc) -> bool {
        rpc.roles().iter().any(|r| self.has(*r))
    }
}

/// A queue pattern of a grant: an exact name, `prefix*` (every queue whose name starts with
/// the prefix), or `*` (every queue).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum QueuePattern {
    /// Exactly this queue.
    Exact(String),
    /// Every queue whose name starts with this (possibly empty: `*`).
    Prefix(String),
}

impl QueuePattern {
    /// Parses a pattern; `*` may only end it, and the rest must be queue-name characters.
    pub fn parse(s: &str) -> Result<QueuePattern, String> {
        let (body, prefix) = match s.strip_suffix('*') {
            Some(b) => (b, true),
            None => (s, false),
        };
        if body.contains('*') {
            return Err(format!(
                "queue pattern {s:?}: `*` may only end a pattern (exact name, prefix*, or *)"
            ));
        }
        // A prefix is checked like a name (its characters, its length); `*` alone has none.
        if !prefix || !body.is_empty() {
            QueueName::parse(body).map_err(|e| format!("queue pattern {s:?} {e}"))?;
        }
        Ok(if prefix {
            QueuePattern::Prefix(body.to_owned())
        } else {
            QueuePattern::Exact(body.to_owned())
        })
    }

    /// Does the pattern match `queue`?
    pub fn matches(&self, queue: &str) -> bool {
        match self {
            QueuePattern::Exact(q) => q == queue,
            QueuePattern::Prefix(p) => queue.starts_with(p.as_str()),
        }
    }
}

impl fmt::Display for QueuePattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            QueuePattern::Exact(q) => f.write_str(q),
            QueuePattern::Prefix(p) => write!(f, "{p}*"),
        }
    }
}

/// Roles on the queues a pattern matches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grant {
    /// The queues.
    pub queues: Vec<QueuePattern>,
    /// The roles on them.
    pub roles: Roles,
}

/// One principal of the auth file with its grants.
#[derive(Clone, Debug)]
pub struct Entry {
    /// The principal's name (logs, audit lines, per-principal limits).
    pub name: String,
    /// Its grants.
    pub grants: Vec<Grant>,
}

impl Entry {
    /// The roles the principal holds on `queue` (the union of every matching grant).
    pub fn roles_on(&self, queue: &str) -> Roles {
        Roles(
            self.grants
                .iter()
                .filter(|g| g.queues.iter().any(|p| p.matches(queue)))
                .fold(0, |acc, g| acc | g.roles.0),
        )
    }

    /// Does any grant hold a role that allows `rpc`, on any queue?
    pub fn allows_somewhere(&self, rpc: Rpc) -> bool {
        self.grants.iter().any(|g| g.roles.allows(rpc))
    }
}

/// The policy of one version of the auth file: principals by token id and by certificate
/// identity. Built by [`super::file::parse`]; swapped as a whole on reload.
#[derive(Clone, Debug, Default)]
pub struct Policy {
    /// Every principal, in file order.
    pub entries: Vec<Entry>,
    /// Token id -> (SHA-256 of its secret, index into `entries`).
    pub tokens: HashMap<String, (SecretHash, usize)>,
    /// Certificate identity (URI SAN, DNS SAN or CN) -> index into `entries`.
    pub certs: HashMap<String, usize>,
}

impl Policy {
    /// The principal whose token has id `id` and whose stored hash matches `hash` (compared in
    /// constant time); `None` for an unknown id or a wrong secret alike.
    pub fn by_token(&self, id: &str, hash: &SecretHash) -> Option<&Entry> {
        match self.tokens.get(id) {
            Some((stored, i)) if stored.matches(hash) => self.entries.get(*i),
            Some(_) => None,
            None => {
                // Spend the same comparison on an unknown id as on a known one.
                let _ = SecretHash([0; 32]).matches(hash);
                None
            }
        }
    }

    /// The principal with certificate identity `identity`.
    pub fn by_cert(&self, identity: &str) -> Option<&Entry> {
        self.certs.get(identity).and_then(|i| self.entries.get(*i))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_match_exact_prefix_and_all() {
        let p = |s: &str| QueuePattern::parse(s).expect("valid in the test");
        assert!(p("emails").matches("emails"));
        assert!(!p("emails").matches("emails2"));
        assert!(p("billing-*").matches("billing-eu"));
        assert!(p("billing-*").matches("billing-"));
        assert!(!p("billing-*").matches("billing"));
        assert!(p("*").matches("anything"));
        for bad in ["a*b", "**", "*x", "bad name", "", "q/x*"] {
            assert!(QueuePattern::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(p("billing-*").to_string(), "billing-*");
    }

    #[test]
    fn the_role_table() {
        let producer = Roles::of(&[Role::Producer]);
        assert!(producer.allows(Rpc::Enqueue) && producer.allows(Rpc::GetJob));
        assert!(!producer.allows(Rpc::Subscribe) && !producer.allows(Rpc::ListQueues));
        // Listing a queue's jobs or the workers is a viewer's read, as ListDeadLetters and
        // ListQueues are; a producer reads its own jobs by id (GetJob).
        assert!(!producer.allows(Rpc::ListJobs) && !producer.allows(Rpc::ListWorkers));
        let viewer = Roles::of(&[Role::Viewer]);
        assert!(viewer.allows(Rpc::ListJobs) && viewer.allows(Rpc::ListWorkers));
        let admin = Roles::of(&[Role::Admin]);
        assert!(admin.allows(Rpc::GetDeadLetter) && admin.allows(Rpc::PurgeQueue));
        assert!(!admin.allows(Rpc::Enqueue) && !admin.allows(Rpc::Ack));
        assert!(!Roles::of(&[Role::Viewer]).allows(Rpc::PauseQueue));
        assert_eq!(Rpc::Enqueue.roles_text(), "producer");
        assert_eq!(Rpc::GetJob.roles_text(), "producer, viewer or admin");
        assert_eq!(Rpc::CancelJob.roles_text(), "producer or admin");
        assert_eq!(Rpc::DeleteJob.roles_text(), "admin");
        assert!(!Roles::of(&[Role::Producer]).allows(Rpc::DeleteJob));
        assert!(!Roles::of(&[Role::Viewer, Role::Worker]).allows(Rpc::CancelJobs));
        for rpc in Rpc::ALL {
            assert!(!rpc.roles().is_empty(), "{rpc:?}");
        }
    }
}
