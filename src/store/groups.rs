//! The groups of a queue (a job's group key: a tenant, a customer): reading one group or a
//! page of them (`groups_read.lua`), and a group's own config, pause and resume
//! (`group_admin.lua`). `scripts/groups.lua` describes the keys and the lease's turns.

use redis::Value;

use super::client::{opt_ms, Store};
use super::codec::{array, int, next, string};
use super::keys::Keys;
use super::{scripts, StoreError};
use crate::jobs::{GroupConfig, GroupField, QueueName};

/// One group's numbers, read from Redis.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GroupInfo {
    /// The group key ('' the queue's default group).
    pub key: String,
    /// Its waiting jobs.
    pub waiting: u64,
    /// Its leased jobs.
    pub active: u64,
    /// Its own config (unset fields: the queue's defaults).
    pub config: GroupConfig,
    /// Leasing of its jobs is paused until then, ms (None: not paused).
    pub paused_until_ms: Option<u64>,
}

/// A page of a queue's groups ([`Store::list_groups`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GroupPage {
    /// Most waiting jobs first, then the groups with leased jobs only.
    pub groups: Vec<GroupInfo>,
    /// Where the next page starts (None: no more).
    pub next_token: Option<String>,
    /// Groups with waiting jobs (the default group counts when it has some).
    pub groups_waiting: u64,
}

/// Values per group in a `groups_read.lua` reply.
const ROW: usize = 8;

fn decode_page(reply: Value) -> Result<GroupPage, StoreError> {
    let mut it = array(reply)?.into_iter();
    let token = string(next(&mut it)?)?;
    let groups_waiting = int(next(&mut it)?)? as u64;
    let mut groups = Vec::with_capacity(it.len() / ROW);
    while it.len() >= ROW {
        let key = string(next(&mut it)?)?;
        let waiting = int(next(&mut it)?)?.max(0) as u64;
        let active = int(next(&mut it)?)?.max(0) as u64;
        let mut c = Vec::with_capacity(4);
        for _ in 0..4 {
            c.push(string(next(&mut it)?)?);
        }
        groups.push(GroupInfo {
            key,
            waiting,
            active,
            config: GroupConfig::from_stored(&c[0], &c[1], &c[2], &c[3]),
            paused_until_ms: opt_ms(int(next(&mut it)?)?),
        });
    }
    Ok(GroupPage {
        groups,
        next_token: (!token.is_empty()).then_some(token),
        groups_waiting,
    })
}

impl Store {
    /// One group of `queue` (`key` '' the default group): a group with no jobs and no
    /// config of its own reads as empty.
    pub async fn group(&self, queue: &QueueName, key: &str) -> Result<GroupInfo, StoreError> {
        let args = vec![b"get".to_vec(), key.as_bytes().to_vec()];
        let reply = self
            .run_script(&scripts::GROUPS_READ, &Keys::new(queue), args)
            .await?;
        decode_page(reply)?
            .groups
            .pop()
            .ok_or_else(|| StoreError::Decode("groups_read: no group".into()))
    }

    /// A page of `queue`'s groups, at most `size`, from `token` (None: the first page):
    /// those with waiting jobs by waiting jobs (most first), then those with leased jobs
    /// only (`groups_read.lua`).
    pub async fn list_groups(
        &self,
        queue: &QueueName,
        token: Option<&str>,
        size: usize,
    ) -> Result<GroupPage, StoreError> {
        let args = vec![
            b"list".to_vec(),
            token.unwrap_or_default().as_bytes().to_vec(),
            size.to_string().into_bytes(),
        ];
        let reply = self
            .run_script(&scripts::GROUPS_READ, &Keys::new(queue), args)
            .await?;
        decode_page(reply)
    }

    /// Writes the named fields of a named group's own config (unset ones go back to the
    /// queue's defaults) and returns its config after the change; a group whose jobs were
    /// held back by a limit is checked again at once (`group_admin.lua`).
    pub async fn set_group_config(
        &self,
        queue: &QueueName,
        key: &str,
        config: &GroupConfig,
        fields: &[GroupField],
    ) -> Result<GroupConfig, StoreError> {
        self.remember_queue(queue).await?;
        let stored = config.stored_fields(fields);
        let mut args = vec![
            b"config".to_vec(),
            key.as_bytes().to_vec(),
            stored.len().to_string().into_bytes(),
        ];
        for (f, v) in stored {
            args.push(f.as_bytes().to_vec());
            args.push(v.into_bytes());
        }
        let reply = self
            .run_script(&scripts::GROUP_ADMIN, &Keys::new(queue), args)
            .await?;
        let mut it = array(reply)?.into_iter();
        let mut c = Vec::with_capacity(4);
        for _ in 0..4 {
            c.push(string(next(&mut it)?)?);
        }
        Ok(GroupConfig::from_stored(&c[0], &c[1], &c[2], &c[3]))
    }

    /// Pauses leasing a named group's jobs on every replica for `duration_ms` (None: until
    /// [`Store::resume_group`]); returns until when, ms.
    pub async fn pause_group(
        &self,
        queue: &QueueName,
        key: &str,
        duration_ms: Option<u64>,
    ) -> Result<u64, StoreError> {
        self.remember_queue(queue).await?;
        let d = duration_ms.map_or(-1, |d| d as i64);
        let args = vec![
            b"pause".to_vec(),
            key.as_bytes().to_vec(),
            d.to_string().into_bytes(),
        ];
        self.intend_due(queue).await;
        let until = int(self
            .run_script(&scripts::GROUP_ADMIN, &Keys::new(queue), args)
            .await?)? as u64;
        // The reaper drops the pause once it is over (an idle group costs nothing).
        if duration_ms.is_some() {
            self.mark_due(queue, until).await;
        }
        Ok(until)
    }

    /// Resumes a paused group (a no-op for one not paused); its waiting jobs are leased
    /// again at once. Returns whether it was paused.
    pub async fn resume_group(&self, queue: &QueueName, key: &str) -> Result<bool, StoreError> {
        let args = vec![b"resume".to_vec(), key.as_bytes().to_vec()];
        let r = self
            .run_script(&scripts::GROUP_ADMIN, &Keys::new(queue), args)
            .await?;
        Ok(int(r)? == 1)
    }
}
