//! `jobwire.v1.GroupService`: a queue's groups (a job's group_key: a tenant, a customer):
//! list by backlog, read one, change a group's own config, pause and resume a group. The
//! turns and limits themselves are the lease script's (`store/scripts/groups.lua`).

use tonic::{Request, Response, Status};

use super::convert;
use super::pb;
use super::queue_service::rate_from_pb;
use crate::auth::audit::{self, AdminAction};
use crate::auth::{Auth, Rpc};
use crate::jobs::{GroupConfig, GroupField};
use crate::lease::Hub;
use crate::store::GroupInfo;
use crate::telemetry::Untrusted;
use crate::Error;

/// Longest PauseGroup duration: 365 days, ms.
const MAX_PAUSE_MS: u64 = 365 * 24 * 3600 * 1000;
/// ListGroups page size when the request says 0.
const DEFAULT_PAGE: usize = 100;
/// Largest ListGroups page.
const MAX_PAGE: usize = 1000;

/// The GroupService handlers.
pub struct GroupApi {
    hub: Hub,
    auth: Auth,
}

impl GroupApi {
    /// Handlers over `hub`'s store; every call is authorized by `auth`, and the changes are
    /// audited.
    pub fn new(hub: Hub, auth: Auth) -> GroupApi {
        GroupApi { hub, auth }
    }
}

/// A group's config as protobuf (its own fields only).
pub(crate) fn group_config_pb(c: &GroupConfig) -> pb::GroupConfig {
    pb::GroupConfig {
        weight: c.weight,
        max_active: c.max_active,
        rate_limit: c.rate_limit.map(|r| pb::RateLimit {
            max: r.max,
            period: Some(convert::duration(r.period_ms)),
        }),
    }
}

/// A group's numbers as protobuf.
pub(crate) fn group_stats_pb(g: GroupInfo) -> pb::GroupStats {
    pb::GroupStats {
        config: Some(group_config_pb(&g.config)),
        group_key: g.key,
        waiting: g.waiting,
        active: g.active,
        paused_until: g.paused_until_ms.and_then(convert::timestamp),
    }
}

fn group_config_from_pb(c: &pb::GroupConfig) -> Result<GroupConfig, Error> {
    let config = GroupConfig {
        weight: c.weight,
        max_active: c.max_active,
        rate_limit: rate_from_pb("config.rate_limit", c.rate_limit.as_ref())?,
    };
    config
        .validate()
        .map_err(|(path, reason)| Error::invalid(format!("config.{path}"), reason))?;
    Ok(config)
}

fn group_mask(m: Option<&prost_types::FieldMask>) -> Result<Vec<GroupField>, Error> {
    match m.filter(|m| !m.paths.is_empty()) {
        None => Ok(GroupField::ALL.to_vec()),
        Some(m) => m
            .paths
            .iter()
            .map(|p| {
                GroupField::parse(p).ok_or_else(|| {
                    Error::invalid(
                        "update_mask",
                        format!("unknown path {p:?}; known: weight, max_active, rate_limit"),
                    )
                })
            })
            .collect(),
    }
}

/// A ListGroups page token: what a previous page returned ('w<n>' or 'a<n>').
fn page_token(t: &str) -> Result<Option<&str>, Error> {
    if t.is_empty() {
        return Ok(None);
    }
    let valid =
        t.len() <= 21 && matches!(t.as_bytes()[0], b'w' | b'a') && t[1..].parse::<u64>().is_ok();
    if !valid {
        return Err(Error::invalid(
            "page_token",
            "is not a token from a previous ListGroups response",
        ));
    }
    Ok(Some(t))
}

fn page_size(n: i32) -> Result<usize, Error> {
    match n {
        0 => Ok(DEFAULT_PAGE),
        1..=1000 => Ok(n as usize),
        _ => Err(Error::invalid(
            "page_size",
            format!("is {n}, must be in [0, {MAX_PAGE}] (0 means {DEFAULT_PAGE})"),
        )),
    }
}

#[tonic::async_trait]
impl pb::group_service_server::GroupService for GroupApi {
    async fn list_groups(
        &self,
        r: Request<pb::ListGroupsRequest>,
    ) -> Result<Response<pb::ListGroupsResponse>, Status> {
        let q = convert::queue("queue", &r.get_ref().queue)?;
        self.auth.check(&r, Rpc::ListGroups, &[&q])?;
        let size = page_size(r.get_ref().page_size)?;
        let token = page_token(&r.get_ref().page_token)?;
        let page = self
            .hub
            .store()
            .list_groups(&q, token, size)
            .await
            .map_err(Error::from)?;
        Ok(Response::new(pb::ListGroupsResponse {
            groups: page.groups.into_iter().map(group_stats_pb).collect(),
            next_page_token: page.next_token.unwrap_or_default(),
            groups_waiting: page.groups_waiting,
        }))
    }

    async fn get_group(
        &self,
        r: Request<pb::GetGroupRequest>,
    ) -> Result<Response<pb::GetGroupResponse>, Status> {
        let q = convert::queue("queue", &r.get_ref().queue)?;
        self.auth.check(&r, Rpc::GetGroup, &[&q])?;
        let key = convert::group_key("group_key", &r.get_ref().group_key, true)?;
        let g = self
            .hub
            .store()
            .group(&q, &key)
            .await
            .map_err(Error::from)?;
        Ok(Response::new(pb::GetGroupResponse {
            group: Some(group_stats_pb(g)),
        }))
    }

    #[tracing::instrument(skip_all, fields(queue))]
    async fn update_group_config(
        &self,
        r: Request<pb::UpdateGroupConfigRequest>,
    ) -> Result<Response<pb::UpdateGroupConfigResponse>, Status> {
        let q = convert::queue("queue", &r.get_ref().queue)?;
        let who = self.auth.check(&r, Rpc::UpdateGroupConfig, &[&q])?;
        let r = r.into_inner();
        let key = convert::group_key("group_key", &r.group_key, false)?;
        let fields = group_mask(r.update_mask.as_ref())?;
        let config = group_config_from_pb(&r.config.unwrap_or_default())?;
        let now = self
            .hub
            .store()
            .set_group_config(&q, &key, &config, &fields)
            .await
            .map_err(Error::from)?;
        tracing::info!(queue = %q, group = %Untrusted(&key), fields = ?fields, "group config updated");
        let names: Vec<&str> = fields.iter().map(|f| f.as_str()).collect();
        audit::record(
            &who,
            AdminAction::UpdateGroupConfig,
            q.as_str(),
            &format!("group={key} fields={}", names.join(",")),
            fields.len() as u64,
        );
        Ok(Response::new(pb::UpdateGroupConfigResponse {
            config: Some(group_config_pb(&now)),
        }))
    }

    #[tracing::instrument(skip_all, fields(queue))]
    async fn pause_group(
        &self,
        r: Request<pb::PauseGroupRequest>,
    ) -> Result<Response<pb::PauseGroupResponse>, Status> {
        let q = convert::queue("queue", &r.get_ref().queue)?;
        let who = self.auth.check(&r, Rpc::PauseGroup, &[&q])?;
        let key = convert::group_key("group_key", &r.get_ref().group_key, false)?;
        let duration =
            convert::duration_ms("duration", r.get_ref().duration.as_ref(), MAX_PAUSE_MS)?;
        if duration == Some(0) {
            return Err(Error::invalid("duration", "must be at least 1 ms when set").into());
        }
        let until = self
            .hub
            .store()
            .pause_group(&q, &key, duration)
            .await
            .map_err(Error::from)?;
        tracing::info!(queue = %q, group = %Untrusted(&key), until_ms = until, "group paused");
        audit::record(
            &who,
            AdminAction::PauseGroup,
            q.as_str(),
            &format!("group={key}"),
            1,
        );
        Ok(Response::new(pb::PauseGroupResponse {
            paused_until: convert::timestamp(until),
        }))
    }

    #[tracing::instrument(skip_all, fields(queue))]
    async fn resume_group(
        &self,
        r: Request<pb::ResumeGroupRequest>,
    ) -> Result<Response<pb::ResumeGroupResponse>, Status> {
        let q = convert::queue("queue", &r.get_ref().queue)?;
        let who = self.auth.check(&r, Rpc::ResumeGroup, &[&q])?;
        let key = convert::group_key("group_key", &r.get_ref().group_key, false)?;
        let was = self
            .hub
            .store()
            .resume_group(&q, &key)
            .await
            .map_err(Error::from)?;
        tracing::info!(queue = %q, group = %Untrusted(&key), was_paused = was, "group resumed");
        audit::record(
            &who,
            AdminAction::ResumeGroup,
            q.as_str(),
            &format!("group={key}"),
            u64::from(was),
        );
        Ok(Response::new(pb::ResumeGroupResponse {}))
    }
}
