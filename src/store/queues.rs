//! Queue-level operations: config and state in the meta hash, pause and resume, purge,
//! delete.

use std::collections::HashMap;

use super::client::Store;
use super::codec::{array, int, next, string};
use super::keys::Keys;
use super::types::{DeleteQueue, DeletedQueue};
use super::{scripts, StoreError};
use crate::jobs::{ConfigField, QueueConfig, QueueName};

/// Jobs one purge call deletes at most (the call repeats until the queue is empty).
const PURGE_BATCH: usize = 1000;
/// Jobs one delete_queue call deletes at most (about a millisecond of Redis time).
const DELETE_BATCH: usize = 1000;

impl Store {
    /// The queue's config as stored (unset fields are `None`).
    pub async fn queue_config(&self, queue: &QueueName) -> Result<QueueConfig, StoreError> {
        let mut conn = self.conn.clone();
        let meta: HashMap<String, String> = redis::cmd("HGETALL")
            .arg(&Keys::new(queue).all[5])
            .query_async(&mut conn)
            .await?;
        Ok(QueueConfig::from_meta(&meta))
    }

    /// Writes the named fields of `config` (unset ones are deleted) in one script call,
    /// waking every replica's lease loop (`set_meta.lua`).
    pub async fn set_queue_config(
        &self,
        queue: &QueueName,
        config: &QueueConfig,
        fields: &[ConfigField],
    ) -> Result<(), StoreError> {
        self.remember_queue(queue).await?;
        let args = config
            .meta_fields(fields)
            .into_iter()
            .flat_map(|(k, v)| [k.as_bytes().to_vec(), v.into_bytes()])
            .collect();
        self.intend_due(queue).await;
        self.run_script(&scripts::SET_META, &Keys::new(queue), args)
            .await?;
        // A new retention age may already be due: let the reaper look now.
        self.mark_due(queue, 0).await;
        Ok(())
    }

    /// Pauses (true) or resumes (false) leasing from the queue on every replica; a resume
    /// wakes the waiting subscribers at once.
    pub async fn set_paused(&self, queue: &QueueName, paused: bool) -> Result<(), StoreError> {
        self.remember_queue(queue).await?;
        let value = if paused { "1" } else { "" };
        let args = vec![b"paused".to_vec(), value.as_bytes().to_vec()];
        self.run_script(&scripts::SET_META, &Keys::new(queue), args)
            .await?;
        Ok(())
    }

    /// Deletes the queue's waiting and delayed jobs (and completed / dead ones if asked),
    /// in bounded script calls (`purge.lua`). Returns how many were deleted.
    pub async fn purge(
        &self,
        queue: &QueueName,
        completed: bool,
        dead: bool,
    ) -> Result<u64, StoreError> {
        let keys = Keys::new(queue);
        let flag = |b: bool| if b { b"1".to_vec() } else { b"0".to_vec() };
        let mut total = 0;
        loop {
            let args = vec![
                flag(completed),
                flag(dead),
                PURGE_BATCH.to_string().into_bytes(),
            ];
            let n = int(self.run_script(&scripts::PURGE, &keys, args).await?)? as u64;
            total += n;
            if n < PURGE_BATCH as u64 {
                return Ok(total);
            }
        }
    }

    /// Deletes the queue: every job in every state, its config and limiter state (in bounded
    /// script calls, `delete_queue.lua`), then its registry and due-index entries. Refused
    /// ([`DeleteQueue::Busy`]) while jobs are leased unless `force` (then the leases' workers
    /// get NOT_FOUND when they settle). A job enqueued while the deletion runs may survive it.
    pub async fn delete_queue(
        &self,
        queue: &QueueName,
        force: bool,
    ) -> Result<DeleteQueue, StoreError> {
        let keys = Keys::new(queue);
        let mut conn = self.conn.clone();
        // The registry and the queue's keys are in different slots: two calls.
        let registered: bool = redis::cmd("SISMEMBER")
            .arg(super::keys::QUEUES_KEY)
            .arg(queue.as_str())
            .query_async(&mut conn)
            .await?;
        let exists: u64 = redis::cmd("EXISTS")
            .arg(&keys.all[..])
            .query_async(&mut conn)
            .await?;
        if !registered && exists == 0 {
            return Ok(DeleteQueue::NotFound);
        }
        let mut done = DeletedQueue::default();
        loop {
            let args = vec![
                if force { b"1".to_vec() } else { b"0".to_vec() },
                DELETE_BATCH.to_string().into_bytes(),
            ];
            let mut reply =
                array(self.run_script(&scripts::DELETE_QUEUE, &keys, args).await?)?.into_iter();
            if string(next(&mut reply)?)? == "BUSY" {
                let leased = int(next(&mut reply)?)? as u64;
                return Ok(DeleteQueue::Busy {
                    leased,
                    deleted: done,
                });
            }
            for slot in [
                &mut done.waiting,
                &mut done.delayed,
                &mut done.active,
                &mut done.completed,
                &mut done.dead,
            ] {
                *slot += int(next(&mut reply)?)? as u64;
            }
            if int(next(&mut reply)?)? == 1 {
                break;
            }
        }
        self.unregister_queue(queue).await?;
        Ok(DeleteQueue::Deleted(done))
    }
}
