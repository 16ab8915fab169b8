"""QueueService from Python, as an operator's tool in another language would use it: pause and
resume, stats, config with an update mask, bad config refused with the field, purge."""

from __future__ import annotations

import grpc
import pytest
from google.protobuf import field_mask_pb2
from grpc_status import rpc_status

from stream import Worker, ms


def bad_request_fields(err: grpc.RpcError, pb) -> list[str]:
    from google.rpc import error_details_pb2

    status = rpc_status.from_call(err)
    fields = []
    for detail in status.details:
        if detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            br = error_details_pb2.BadRequest()
            detail.Unpack(br)
            fields.extend(v.field for v in br.field_violations)
    return fields


def test_pause_stats_resume(stubs, channel, queue_name):
    pb = stubs
    queues = pb.QueueServiceStub(channel)
    queues.PauseQueue(pb.PauseQueueRequest(queue=queue_name))
    pb.JobServiceStub(channel).Enqueue(pb.EnqueueRequest(job=pb.JobSpec(queue=queue_name, job_id="a", name="n")))
    with Worker(channel, [queue_name], credits=1, worker_id="py-ops") as worker:
        with pytest.raises(TimeoutError):
            worker.next_lease(timeout=0.5)
        stats = queues.GetQueueStats(pb.GetQueueStatsRequest(queue=queue_name)).stats
        assert stats.paused and stats.waiting == 1 and stats.workers_connected == 1
        queues.ResumeQueue(pb.ResumeQueueRequest(queue=queue_name))
        lease = worker.next_lease(timeout=1.5)
        assert lease.job.job_id == "a"
        worker.ack(lease)
    listed = queues.ListQueues(pb.ListQueuesRequest()).queues
    assert queue_name in [q.queue for q in listed]


def test_config_update_mask_and_refusal(stubs, channel, queue_name):
    pb = stubs
    queues = pb.QueueServiceStub(channel)
    cfg = queues.UpdateQueueConfig(pb.UpdateQueueConfigRequest(
        queue=queue_name,
        config=pb.QueueConfig(rate_limit=pb.RateLimit(max=20, period=ms(1000)), max_active=5),
    )).config
    assert cfg.rate_limit.max == 20 and cfg.max_active == 5
    cfg = queues.UpdateQueueConfig(pb.UpdateQueueConfigRequest(
        queue=queue_name, config=pb.QueueConfig(), update_mask=field_mask_pb2.FieldMask(paths=["max_active"]),
    )).config
    assert not cfg.HasField("max_active") and cfg.rate_limit.max == 20
    with pytest.raises(grpc.RpcError) as e:
        queues.UpdateQueueConfig(pb.UpdateQueueConfigRequest(
            queue=queue_name, config=pb.QueueConfig(rate_limit=pb.RateLimit(max=0, period=ms(1000)))))
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert bad_request_fields(e.value, pb) == ["config.rate_limit.max"]
    after = queues.GetQueueConfig(pb.GetQueueConfigRequest(queue=queue_name)).config
    assert after.rate_limit.max == 20, "a refused update changes nothing"


def test_purge(stubs, channel, queue_name):
    pb = stubs
    jobs = pb.JobServiceStub(channel)
    jobs.EnqueueBatch(pb.EnqueueBatchRequest(jobs=[pb.JobSpec(queue=queue_name, job_id=f"j{i}", name="n") for i in range(7)]))
    deleted = pb.QueueServiceStub(channel).PurgeQueue(pb.PurgeQueueRequest(queue=queue_name)).deleted
    assert deleted == 7
    with pytest.raises(grpc.RpcError) as e:
        jobs.GetJob(pb.GetJobRequest(queue=queue_name, job_id="j0"))
    assert e.value.code() == grpc.StatusCode.NOT_FOUND
