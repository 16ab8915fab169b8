//! Progress reports of leased jobs (`progress.lua`): the progress and checkpoint entries of
//! the queue's `data` hash (`scripts/common.lua`, KEYS 19), fenced by the lease token.

use super::client::Store;
use super::codec::{bad, int, next};
use super::scripts;
use super::types::Settle;
use super::StoreError;
use crate::jobs::{ProgressReport, QueueName};

impl Store {
    /// Saves `report` on job `id` of `queue` if it is active under `token`
    /// (`progress.lua`): a percent or message left unset keeps the last one, a checkpoint
    /// left unset keeps the last one and an empty one deletes it. `Done` carries the time
    /// it was saved (ms, Redis's clock); `LeaseLost` and `NotFound` changed nothing. The
    /// caller bounds the sizes (the API's limits).
    pub async fn report_progress(
        &self,
        queue: &QueueName,
        id: &str,
        token: &str,
        report: &ProgressReport,
    ) -> Result<Settle<u64>, StoreError> {
        let mut set = String::new();
        if report.progress.is_some() {
            set.push('p');
        }
        if report.message.is_some() {
            set.push('m');
        }
        if report.checkpoint.is_some() {
            set.push('c');
        }
        let args = vec![
            id.as_bytes().to_vec(),
            token.as_bytes().to_vec(),
            set.into_bytes(),
            report.progress.unwrap_or(0).to_string().into_bytes(),
            report.message.clone().unwrap_or_default().into_bytes(),
            report.checkpoint.clone().unwrap_or_default(),
        ];
        let mut out = self
            .settle_call(&scripts::PROGRESS, queue, args, |mut it, _| {
                Ok(int(next(&mut it)?)? as u64)
            })
            .await?;
        out.pop()
            .ok_or_else(|| bad("progress.lua answered for no job"))
    }
}
