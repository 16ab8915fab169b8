//! The audit trail of admin actions: each replay, dead-letter delete, purge, pause, resume,
//! config change and queue delete (and group config change, pause and resume) that was
//! carried out writes one structured log line
//! (tracing target `jobwire::audit`: principal, action, queue, filter, count) and increments
//! `jobwire_admin_actions_total{action}`. An admin call refused for want of a role writes a
//! line too (`outcome = "denied"`), and is not counted; when the principal holds the role on
//! no queue at all, the call is refused before its request is read and the line's `queue` is
//! empty.
//!
//! Select the lines with `RUST_LOG=...,jobwire::audit=info` (on by default) and
//! `--log-format json` for a log pipeline.

use super::identity::Principal;
use super::policy::Rpc;

/// The tracing target of audit lines.
pub const TARGET: &str = "jobwire::audit";

/// An admin action, as the `action` label and field name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AdminAction {
    /// ReplayDeadLetters.
    ReplayDeadLetters,
    /// DeleteDeadLetters.
    DeleteDeadLetters,
    /// PurgeQueue.
    PurgeQueue,
    /// PauseQueue.
    PauseQueue,
    /// ResumeQueue.
    ResumeQueue,
    /// UpdateQueueConfig.
    UpdateQueueConfig,
    /// DeleteQueue.
    DeleteQueue,
    /// CancelJobs (a bulk cancel by filter).
    CancelJobs,
    /// DeleteJob.
    DeleteJob,
    /// UpdateGroupConfig.
    UpdateGroupConfig,
    /// PauseGroup.
    PauseGroup,
    /// ResumeGroup.
    ResumeGroup,
}

impl AdminAction {
    /// Every admin action (each has a counter series from the start).
    pub const ALL: [AdminAction; 12] = [
        AdminAction::ReplayDeadLetters,
        AdminAction::DeleteDeadLetters,
        AdminAction::PurgeQueue,
        AdminAction::PauseQueue,
        AdminAction::ResumeQueue,
        AdminAction::UpdateQueueConfig,
        AdminAction::DeleteQueue,
        AdminAction::CancelJobs,
        AdminAction::DeleteJob,
        AdminAction::UpdateGroupConfig,
        AdminAction::PauseGroup,
        AdminAction::ResumeGroup,
    ];

    /// The `action` label value: the RPC's name in snake case.
    pub fn as_str(self) -> &'static str {
        match self {
            AdminAction::ReplayDeadLetters => "replay_dead_letters",
            AdminAction::DeleteDeadLetters => "delete_dead_letters",
            AdminAction::PurgeQueue => "purge_queue",
            AdminAction::PauseQueue => "pause_queue",
            AdminAction::ResumeQueue => "resume_queue",
            AdminAction::UpdateQueueConfig => "update_queue_config",
            AdminAction::DeleteQueue => "delete_queue",
            AdminAction::CancelJobs => "cancel_jobs",
            AdminAction::DeleteJob => "delete_job",
            AdminAction::UpdateGroupConfig => "update_group_config",
            AdminAction::PauseGroup => "pause_group",
            AdminAction::ResumeGroup => "resume_group",
        }
    }

    /// The admin action an RPC is, if it is one.
    pub fn of(rpc: Rpc) -> Option<AdminAction> {
        Some(match rpc {
            Rpc::ReplayDeadLetters => AdminAction::ReplayDeadLetters,
            Rpc::DeleteDeadLetters => AdminAction::DeleteDeadLetters,
            Rpc::PurgeQueue => AdminAction::PurgeQueue,
            Rpc::PauseQueue => AdminAction::PauseQueue,
            Rpc::ResumeQueue => AdminAction::ResumeQueue,
            Rpc::UpdateQueueConfig => AdminAction::UpdateQueueConfig,
            Rpc::DeleteQueue => AdminAction::DeleteQueue,
            Rpc::CancelJobs => AdminAction::CancelJobs,
            Rpc::DeleteJob => AdminAction::DeleteJob,
            Rpc::UpdateGroupConfig => AdminAction::UpdateGroupConfig,
            Rpc::PauseGroup => AdminAction::PauseGroup,
            Rpc::ResumeGroup => AdminAction::ResumeGroup,
            _ => return None,
        })
    }
}

/// Records an admin action `principal` carried out on `queue`: `filter` says what it
/// selected (ids, a dead-letter filter, the config fields, flags), `count` how many jobs
/// (or fields) it touched.
pub fn record(principal: &Principal, action: AdminAction, queue: &str, filter: &str, count: u64) {
    tracing::info!(target: TARGET, principal = %principal.name, via = %principal.via(),
        action = action.as_str(), queue, filter, count, outcome = "done", "admin action");
    metrics::counter!(crate::metrics::ADMIN_ACTIONS, "action" => action.as_str()).increment(1);
}

/// Records an admin call refused because `principal` lacks the role on `queue`.
pub(crate) fn denied(principal: &Principal, rpc: Rpc, queue: &str) {
    let action = AdminAction::of(rpc).map(AdminAction::as_str).unwrap_or("");
    tracing::warn!(target: TARGET, principal = %principal.name, via = %principal.via(),
        action, queue, outcome = "denied", "admin action denied");
}

/// Records an admin call refused before its request was read, because no grant of
/// `principal` allows it on any queue: the queue is not known, so `queue` is empty.
pub(crate) fn denied_everywhere(principal: &Principal, rpc: Rpc) {
    let action = AdminAction::of(rpc).map(AdminAction::as_str).unwrap_or("");
    tracing::warn!(target: TARGET, principal = %principal.name, via = %principal.via(),
        action, queue = "", outcome = "denied", "admin action denied");
}

/// Starts `jobwire_admin_actions_total` at 0 for every action, so that `rate()` and
/// `increase()` see the first one.
pub fn zero_counters() {
    for a in AdminAction::ALL {
        metrics::counter!(crate::metrics::ADMIN_ACTIONS, "action" => a.as_str()).increment(0);
    }
}
