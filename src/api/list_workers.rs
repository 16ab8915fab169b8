//! `QueueService.ListWorkers`: every replica's worker streams. This replica's come live from
//! its hub; the others' from their last report in Redis (`store/workers.rs`), so up to one
//! report interval old. What the caller may not view is left out: a stream shows only the
//! queues (and the leases of the queues) the caller may view, and a stream with none is not
//! listed.

use std::collections::{BTreeMap, BTreeSet};

use tonic::Request;

use super::convert;
use super::pb;
use crate::auth::{Auth, Rpc};
use crate::jobs::{QueueName, ReplicaWorkers};
use crate::lease::Hub;
use crate::Error;

/// Serves ListWorkers for `r`.
pub(crate) async fn list(
    hub: &Hub,
    auth: &Auth,
    r: &Request<pb::ListWorkersRequest>,
) -> Result<pb::ListWorkersResponse, Error> {
    let only = match r.get_ref().queue.as_str() {
        "" => {
            // Refused at once when no grant allows ListWorkers anywhere.
            auth.visible(r, Rpc::ListWorkers, Vec::new())?;
            None
        }
        q => {
            let q = convert::queue("queue", q)?;
            auth.check(r, Rpc::ListWorkers, &[&q])?;
            Some(q)
        }
    };
    let local = hub.worker_streams();
    let mut replicas: BTreeMap<String, (ReplicaWorkers, bool)> = BTreeMap::new();
    for report in hub.store().workers_reports().await? {
        replicas.insert(report.replica_id.clone(), (report, false));
    }
    replicas.insert(local.replica_id.clone(), (local, true));
    // Which of the streams' queues the caller may view, asked once for them all.
    let named: BTreeSet<&str> = replicas
        .values()
        .flat_map(|(r, _)| r.streams.iter().flat_map(|s| s.queues.iter()))
        .map(String::as_str)
        .collect();
    let names: Vec<QueueName> = named
        .into_iter()
        .filter_map(|q| QueueName::parse(q).ok())
        .collect();
    let visible: BTreeSet<String> = auth
        .visible(r, Rpc::ListWorkers, names)?
        .into_iter()
        .map(|q| q.to_string())
        .collect();
    let mut out = pb::ListWorkersResponse::default();
    for (id, (report, answered)) in replicas {
        out.replicas.push(pb::Replica {
            replica_id: id.clone(),
            snapshot_time: convert::timestamp(report.at_ms),
            answered,
        });
        for s in report.streams {
            if let Some(q) = &only {
                if !s.queues.iter().any(|x| x == q.as_str()) {
                    continue;
                }
            }
            let queues: Vec<String> = s
                .queues
                .into_iter()
                .filter(|q| visible.contains(q))
                .collect();
            if queues.is_empty() {
                continue;
            }
            // Leases of queues the caller may not view are left out of the list and the count.
            let held: u64 = s
                .held
                .iter()
                .filter(|(q, _)| visible.contains(*q))
                .map(|(_, n)| n)
                .sum();
            let leases: Vec<pb::HeldLease> = s
                .leases
                .into_iter()
                .filter(|(q, _)| visible.contains(q))
                .map(|(queue, job_id)| pb::HeldLease { queue, job_id })
                .collect();
            out.streams.push(pb::WorkerStream {
                replica_id: id.clone(),
                stream_id: format!("{id}/{}", s.stream),
                worker_id: s.worker_id,
                queues,
                credits: s.credits as u32,
                held_leases: held as u32,
                leases,
                connect_time: convert::timestamp(s.connected_ms),
                last_heard_time: convert::timestamp(s.last_heard_ms),
                draining: s.draining,
            });
        }
    }
    Ok(out)
}
