//! Thin wrappers of GroupService: the groups (job group keys: tenants, customers) of a queue.

use std::time::{Duration, SystemTime};

use super::{pb_duration, retry_unavailable};
use crate::{pb, Client, Error};

impl Client {
    /// One page of `queue`'s groups that have waiting or active jobs, most waiting jobs
    /// first (`page_size` 0: 100), with how many groups have waiting jobs. Pass the
    /// response's `next_page_token` for the next page; only an empty one ends the walk.
    pub async fn list_groups(
        &self,
        queue: &str,
        page_size: i32,
        page_token: &str,
    ) -> Result<pb::ListGroupsResponse, Error> {
        let req = pb::ListGroupsRequest {
            queue: queue.into(),
            page_size,
            page_token: page_token.into(),
        };
        retry_unavailable(|| {
            let (mut c, req) = (self.groups(), req.clone());
            async move { c.list_groups(req).await }
        })
        .await
    }

    /// One group's counts, config and pause (a group with no jobs and no config of its own
    /// reads as empty with the queue's defaults).
    pub async fn get_group(&self, queue: &str, group_key: &str) -> Result<pb::GroupStats, Error> {
        let req = pb::GetGroupRequest {
            queue: queue.into(),
            group_key: group_key.into(),
        };
        let r = retry_unavailable(|| {
            let (mut c, req) = (self.groups(), req.clone());
            async move { c.get_group(req).await }
        })
        .await?;
        Ok(r.group.unwrap_or_default())
    }

    /// Sets the fields of `config` named in `paths` (`weight`, `max_active`, `rate_limit`;
    /// AIP-134: a named field left unset goes back to the queue's default; empty: every
    /// field) on group `group_key` of `queue`; returns the group's new config.
    pub async fn update_group_config(
        &self,
        queue: &str,
        group_key: &str,
        config: pb::GroupConfig,
        paths: &[&str],
    ) -> Result<pb::GroupConfig, Error> {
        let req = pb::UpdateGroupConfigRequest {
            queue: queue.into(),
            group_key: group_key.into(),
            config: Some(config),
            update_mask: Some(prost_types::FieldMask {
                paths: paths.iter().map(|p| (*p).to_owned()).collect(),
            }),
        };
        let r = retry_unavailable(|| {
            let (mut c, req) = (self.groups(), req.clone());
            async move { c.update_group_config(req).await }
        })
        .await?;
        Ok(r.config.unwrap_or_default())
    }

    /// Stops leasing group `group_key`'s jobs on every replica for `duration` (1 ms to 365
    /// days; `None`: until [`Client::resume_group`]); enqueues are still accepted and the
    /// other groups go on. Returns until when it is paused.
    pub async fn pause_group(
        &self,
        queue: &str,
        group_key: &str,
        duration: Option<Duration>,
    ) -> Result<Option<SystemTime>, Error> {
        let req = pb::PauseGroupRequest {
            queue: queue.into(),
            group_key: group_key.into(),
            duration: duration.map(pb_duration),
        };
        let r = retry_unavailable(|| {
            let (mut c, req) = (self.groups(), req.clone());
            async move { c.pause_group(req).await }
        })
        .await?;
        Ok(r.paused_until.and_then(|t| SystemTime::try_from(t).ok()))
    }

    /// Resumes leasing a paused group (paused by [`Client::pause_group`] or by a worker's
    /// [`crate::JobError::rate_limited_group`]).
    pub async fn resume_group(&self, queue: &str, group_key: &str) -> Result<(), Error> {
        let req = pb::ResumeGroupRequest {
            queue: queue.into(),
            group_key: group_key.into(),
        };
        retry_unavailable(|| {
            let (mut c, req) = (self.groups(), req.clone());
            async move { c.resume_group(req).await }
        })
        .await?;
        Ok(())
    }
}
