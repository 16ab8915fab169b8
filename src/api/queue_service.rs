//! `jobwire.v1.QueueService`: list, stats, pause/resume, config, purge, delete, and the
//! replicas' worker streams (`list_workers.rs`).

use tonic::{Request, Response, Status};

use super::convert;
use super::limits::MAX_BACKOFF_MS;
use super::pb;
use crate::auth::audit::{self, AdminAction};
use crate::auth::{Auth, Rpc};
use crate::jobs::{
    ConfigField, QueueConfig, QueueName, RateLimit, Retention, DEFAULT_CANCEL_GRACE_MS,
    DEFAULT_DEAD_MAX_AGE_MS, DEFAULT_KEEP_COMPLETED, DEFAULT_KEEP_DEAD, MAX_CANCEL_GRACE_MS,
};
use crate::lease::Hub;
use crate::store::{DeleteQueue, GroupInfo, QueueStats};
use crate::Error;

/// The QueueService handlers.
pub struct QueueApi {
    hub: Hub,
    auth: Auth,
}

impl QueueApi {
    /// Handlers over `hub` (its store, and its stream count for `workers_connected`); every
    /// call is authorized by `auth`, and admin actions are audited.
    pub fn new(hub: Hub, auth: Auth) -> QueueApi {
        QueueApi { hub, auth }
    }

    async fn stats(&self, queues: &[QueueName]) -> Result<Vec<pb::QueueStats>, Error> {
        let store = self.hub.store();
        let stats = store.queue_stats(queues).await?;
        let sessions = self.hub.sessions();
        let mut out = Vec::with_capacity(stats.len());
        for (q, s) in queues.iter().zip(stats) {
            let config = store.queue_config(q).await?;
            let workers = sessions.iter().filter(|w| w.queues.contains(q)).count() as u32;
            let top = store.list_groups(q, None, TOP_GROUPS).await?.groups;
            out.push(stats_pb(s, workers, config, top));
        }
        Ok(out)
    }
}

/// Groups listed in QueueStats.top_groups.
const TOP_GROUPS: usize = 10;

fn stats_pb(
    s: QueueStats,
    workers: u32,
    config: QueueConfig,
    top: Vec<GroupInfo>,
) -> pb::QueueStats {
    pb::QueueStats {
        queue: s.queue,
        waiting: s.waiting,
        delayed: s.delayed,
        active: s.active,
        completed: s.completed,
        dead: s.dead,
        oldest_waiting_age: Some(convert::duration(s.oldest_waiting_ms)),
        oldest_dead_age: Some(convert::duration(s.oldest_dead_ms)),
        paused: s.paused,
        workers_connected: workers,
        config: Some(config_pb(&config)),
        cancelled: s.cancelled,
        expired: s.expired,
        groups_waiting: s.groups_waiting,
        // The groups with the most waiting jobs (groups with leased jobs only follow them in
        // a listing: not "top by backlog").
        top_groups: top
            .into_iter()
            .filter(|g| g.waiting > 0)
            .map(|g| pb::GroupCount {
                group_key: g.key,
                waiting: g.waiting,
                active: g.active,
            })
            .collect(),
    }
}

/// The config as protobuf, retention with its effective defaults filled in.
pub(crate) fn config_pb(c: &QueueConfig) -> pb::QueueConfig {
    let r = &c.retention;
    pb::QueueConfig {
        default_max_attempts: c.default_max_attempts,
        default_backoff: c.default_backoff.as_ref().map(convert::backoff_pb),
        default_timeout: c.default_timeout_ms.map(convert::duration),
        retention: Some(pb::Retention {
            keep_completed: Some(r.keep_completed.unwrap_or(DEFAULT_KEEP_COMPLETED) as u32),
            completed_max_age: r.completed_max_age_ms.map(convert::duration),
            keep_dead: Some(r.keep_dead.unwrap_or(DEFAULT_KEEP_DEAD) as u32),
            dead_max_age: Some(convert::duration(
                r.dead_max_age_ms.unwrap_or(DEFAULT_DEAD_MAX_AGE_MS),
            )),
        }),
        rate_limit: c.rate_limit.map(|r| pb::RateLimit {
            max: r.max,
            period: Some(convert::duration(r.period_ms)),
        }),
        max_active: c.max_active,
        group_max_active: c.group_max_active,
        group_rate_limit: c.group_rate_limit.map(|r| pb::RateLimit {
            max: r.max,
            period: Some(convert::duration(r.period_ms)),
        }),
        cancel_grace: Some(convert::duration(
            c.cancel_grace_ms.unwrap_or(DEFAULT_CANCEL_GRACE_MS),
        )),
        dead_letter_expired: c.dead_letter_expired,
    }
}

/// A protobuf rate limit (unvalidated ranges: [`RateLimit::validate`]); `field` names it in
/// errors.
pub(crate) fn rate_from_pb(
    field: &str,
    rl: Option<&pb::RateLimit>,
) -> Result<Option<RateLimit>, Error> {
    let Some(rl) = rl else { return Ok(None) };
    let period = format!("{field}.period");
    Ok(Some(RateLimit {
        max: rl.max,
        period_ms: convert::duration_ms(&period, rl.period.as_ref(), 86_400_000)?
            .ok_or_else(|| Error::invalid(period, "is required"))?,
    }))
}

/// Validates a protobuf config (every field; `field` prefixes the paths in errors).
pub(crate) fn config_from_pb(field: &str, c: &pb::QueueConfig) -> Result<QueueConfig, Error> {
    let f = |name: &str| format!("{field}.{name}");
    let r = c.retention.unwrap_or_default();
    let rate_limit = rate_from_pb(&f("rate_limit"), c.rate_limit.as_ref())?;
    let group_rate_limit = rate_from_pb(&f("group_rate_limit"), c.group_rate_limit.as_ref())?;
    let config = QueueConfig {
        default_max_attempts: c.default_max_attempts,
        default_backoff: c
            .default_backoff
            .as_ref()
            .map(|b| convert::backoff(&f("default_backoff"), b))
            .transpose()?,
        default_timeout_ms: convert::duration_ms(
            &f("default_timeout"),
            c.default_timeout.as_ref(),
            MAX_BACKOFF_MS,
        )?,
        retention: Retention {
            keep_completed: r.keep_completed.map(u64::from),
            completed_max_age_ms: convert::duration_ms(
                &f("retention.completed_max_age"),
                r.completed_max_age.as_ref(),
                u64::MAX / 2,
            )?,
            keep_dead: r.keep_dead.map(u64::from),
            dead_max_age_ms: convert::duration_ms(
                &f("retention.dead_max_age"),
                r.dead_max_age.as_ref(),
                u64::MAX / 2,
            )?,
        },
        rate_limit,
        max_active: c.max_active,
        group_max_active: c.group_max_active,
        group_rate_limit,
        cancel_grace_ms: convert::duration_ms(
            &f("cancel_grace"),
            c.cancel_grace.as_ref(),
            MAX_CANCEL_GRACE_MS,
        )?,
        dead_letter_expired: c.dead_letter_expired,
    };
    if config.default_timeout_ms == Some(0) {
        return Err(Error::invalid(
            f("default_timeout"),
            "must be at least 1 ms when set",
        ));
    }
    config
        .validate()
        .map_err(|(path, reason)| Error::invalid(f(&path), reason))?;
    Ok(config)
}

fn mask(
    m: Option<&prost_types::FieldMask>,
    c: &pb::QueueConfig,
) -> Result<Vec<ConfigField>, Error> {
    match m.filter(|m| !m.paths.is_empty()) {
        Some(m) => m
            .paths
            .iter()
            .map(|p| ConfigField::parse(p).ok_or_else(|| Error::invalid("update_mask", format!("unknown path {p:?}; known: default_max_attempts, default_backoff, default_timeout, retention, rate_limit, max_active, group_max_active, group_rate_limit, cancel_grace, dead_letter_expired"))))
            .collect(),
        None => {
            let mut fields = Vec::new();
            let set = [
                (c.default_max_attempts.is_some(), ConfigField::DefaultMaxAttempts),
                (c.default_backoff.is_some(), ConfigField::DefaultBackoff),
                (c.default_timeout.is_some(), ConfigField::DefaultTimeout),
                (c.retention.is_some(), ConfigField::Retention),
                (c.rate_limit.is_some(), ConfigField::RateLimit),
                (c.max_active.is_some(), ConfigField::MaxActive),
                (c.group_max_active.is_some(), ConfigField::GroupMaxActive),
                (c.group_rate_limit.is_some(), ConfigField::GroupRateLimit),
                (c.cancel_grace.is_some(), ConfigField::CancelGrace),
                (c.dead_letter_expired, ConfigField::DeadLetterExpired),
            ];
            for (is_set, f) in set {
                if is_set {
                    fields.push(f);
                }
            }
            Ok(fields)
        }
    }
}

#[tonic::async_trait]
impl pb::queue_service_server::QueueService for QueueApi {
    /// With an auth file: only the queues the principal may view (viewer or admin on them);
    /// PERMISSION_DENIED when it may view no queue at all.
    async fn list_queues(
        &self,
        r: Request<pb::ListQueuesRequest>,
    ) -> Result<Response<pb::ListQueuesResponse>, Status> {
        self.auth.visible(&r, Rpc::ListQueues, Vec::new())?;
        let queues = self.hub.store().queues().await.map_err(Error::from)?;
        let queues = self.auth.visible(&r, Rpc::ListQueues, queues)?;
        Ok(Response::new(pb::ListQueuesResponse {
            queues: self.stats(&queues).await?,
        }))
    }

    async fn get_queue_stats(
        &self,
        r: Request<pb::GetQueueStatsRequest>,
    ) -> Result<Response<pb::GetQueueStatsResponse>, Status> {
        let q = convert::queue("queue", &r.get_ref().queue)?;
        self.auth.check(&r, Rpc::GetQueueStats, &[&q])?;
        let stats = self.stats(std::slice::from_ref(&q)).await?.pop();
        Ok(Response::new(pb::GetQueueStatsResponse { stats }))
    }

    #[tracing::instrument(skip_all, fields(queue))]
    async fn pause_queue(
        &self,
        r: Request<pb::PauseQueueRequest>,
    ) -> Result<Response<pb::PauseQueueResponse>, Status> {
        let q = convert::queue("queue", &r.get_ref().queue)?;
        let who = self.auth.check(&r, Rpc::PauseQueue, &[&q])?;
        self.hub
            .store()
            .set_paused(&q, true)
            .await
            .map_err(Error::from)?;
        tracing::info!(queue = %q, "queue paused");
        audit::record(&who, AdminAction::PauseQueue, q.as_str(), "", 1);
        Ok(Response::new(pb::PauseQueueResponse {}))
    }

    #[tracing::instrument(skip_all, fields(queue))]
    async fn resume_queue(
        &self,
        r: Request<pb::ResumeQueueRequest>,
    ) -> Result<Response<pb::ResumeQueueResponse>, Status> {
        let q = convert::queue("queue", &r.get_ref().queue)?;
        let who = self.auth.check(&r, Rpc::ResumeQueue, &[&q])?;
        self.hub
            .store()
            .set_paused(&q, false)
            .await
            .map_err(Error::from)?;
        tracing::info!(queue = %q, "queue resumed");
        audit::record(&who, AdminAction::ResumeQueue, q.as_str(), "", 1);
        Ok(Response::new(pb::ResumeQueueResponse {}))
    }

    async fn get_queue_config(
        &self,
        r: Request<pb::GetQueueConfigRequest>,
    ) -> Result<Response<pb::GetQueueConfigResponse>, Status> {
        let q = convert::queue("queue", &r.get_ref().queue)?;
        self.auth.check(&r, Rpc::GetQueueConfig, &[&q])?;
        let config = self
            .hub
            .store()
            .queue_config(&q)
            .await
            .map_err(Error::from)?;
        Ok(Response::new(pb::GetQueueConfigResponse {
            config: Some(config_pb(&config)),
        }))
    }

    #[tracing::instrument(skip_all, fields(queue))]
    async fn update_queue_config(
        &self,
        r: Request<pb::UpdateQueueConfigRequest>,
    ) -> Result<Response<pb::UpdateQueueConfigResponse>, Status> {
        let q = convert::queue("queue", &r.get_ref().queue)?;
        let who = self.auth.check(&r, Rpc::UpdateQueueConfig, &[&q])?;
        let r = r.into_inner();
        let given = r.config.unwrap_or_default();
        let fields = mask(r.update_mask.as_ref(), &given)?;
        let config = config_from_pb("config", &given)?;
        let store = self.hub.store();
        store
            .set_queue_config(&q, &config, &fields)
            .await
            .map_err(Error::from)?;
        tracing::info!(queue = %q, fields = ?fields, "queue config updated");
        let names: Vec<&str> = fields.iter().map(|f| f.as_str()).collect();
        audit::record(
            &who,
            AdminAction::UpdateQueueConfig,
            q.as_str(),
            &format!("fields={}", names.join(",")),
            fields.len() as u64,
        );
        let now = store.queue_config(&q).await.map_err(Error::from)?;
        Ok(Response::new(pb::UpdateQueueConfigResponse {
            config: Some(config_pb(&now)),
        }))
    }

    #[tracing::instrument(skip_all, fields(queue))]
    async fn purge_queue(
        &self,
        r: Request<pb::PurgeQueueRequest>,
    ) -> Result<Response<pb::PurgeQueueResponse>, Status> {
        let q = convert::queue("queue", &r.get_ref().queue)?;
        let who = self.auth.check(&r, Rpc::PurgeQueue, &[&q])?;
        let r = r.into_inner();
        let deleted = self
            .hub
            .store()
            .purge(&q, r.include_completed, r.include_dead)
            .await
            .map_err(Error::from)?;
        tracing::info!(queue = %q, deleted, "queue purged");
        audit::record(
            &who,
            AdminAction::PurgeQueue,
            q.as_str(),
            &format!(
                "include_completed={} include_dead={}",
                r.include_completed, r.include_dead
            ),
            deleted,
        );
        Ok(Response::new(pb::PurgeQueueResponse { deleted }))
    }

    #[tracing::instrument(skip_all, fields(queue))]
    async fn delete_queue(
        &self,
        r: Request<pb::DeleteQueueRequest>,
    ) -> Result<Response<pb::DeleteQueueResponse>, Status> {
        let q = convert::queue("queue", &r.get_ref().queue)?;
        let who = self.auth.check(&r, Rpc::DeleteQueue, &[&q])?;
        let r = r.into_inner();
        let outcome = self
            .hub
            .store()
            .delete_queue(&q, r.force)
            .await
            .map_err(Error::from)?;
        let d = match outcome {
            DeleteQueue::Deleted(d) => d,
            DeleteQueue::NotFound => {
                return Err(Error::QueueNotFound {
                    queue: q.to_string(),
                }
                .into())
            }
            DeleteQueue::Busy { leased, deleted } => {
                tracing::info!(queue = %q, leased, deleted = ?deleted, "queue deletion refused: jobs are leased");
                return Err(Error::QueueBusy {
                    queue: q.to_string(),
                    leased,
                }
                .into());
            }
        };
        tracing::info!(queue = %q, force = r.force, deleted = ?d, "queue deleted");
        audit::record(
            &who,
            AdminAction::DeleteQueue,
            q.as_str(),
            &format!("force={}", r.force),
            d.waiting + d.delayed + d.active + d.completed + d.dead,
        );
        Ok(Response::new(pb::DeleteQueueResponse {
            waiting: d.waiting,
            delayed: d.delayed,
            active: d.active,
            completed: d.completed,
            dead: d.dead,
        }))
    }

    /// With an auth file: only the queues the caller may view (viewer or admin on them), as
    /// ListQueues; a `queue` filter must be one of them (else PERMISSION_DENIED).
    async fn list_workers(
        &self,
        r: Request<pb::ListWorkersRequest>,
    ) -> Result<Response<pb::ListWorkersResponse>, Status> {
        Ok(Response::new(
            super::list_workers::list(&self.hub, &self.auth, &r).await?,
        ))
    }
}
