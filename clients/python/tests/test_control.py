"""Job control (issue 16) against a real server: a cancel reaching a sync handler, a revoked
lease, cancel_jobs paging, delete and cancel edge cases, the GroupService wrapper and the new
queue config fields, and the sync client's job control."""

from __future__ import annotations

import asyncio
import threading
from datetime import datetime, timedelta, timezone

import grpc
import pytest

import jobwire
import jobwire.sync
from jobwire import pb
from jobwire.errors import LeaseLost, duration
from jobwire.testing import JobwireServer

from .conftest import Running, eventually
from .control_scenarios import wait_state


async def test_a_sync_handler_sees_the_cancel_in_its_threading_event(
    client: jobwire.Client, queue: str
) -> None:
    await client.enqueue(queue, "sync-long", b"", job_id="s", max_attempts=3)
    worker = jobwire.Worker(client, [queue], handle_signals=False)
    started = threading.Event()
    seen: list[tuple[bool, str | None]] = []

    @worker.handler("sync-long")
    def sync_long(ctx: jobwire.JobContext) -> None:
        started.set()
        seen.append((ctx.cancelled_sync.wait(10), ctx.cancel_reason))
        raise RuntimeError("stopped: " + (ctx.cancel_reason or ""))

    running = Running(worker)
    await eventually(lambda: asyncio.sleep(0, started.is_set()), 15, "the handler running")
    _, cancelled = await client.cancel_job(queue, "s", "tenant deleted")
    job = await wait_state(client, queue, "s", pb.JOB_STATE_CANCELLED)
    await running.stop()
    assert cancelled and seen == [(True, "tenant deleted")]
    assert job.attempts_made == 1 and job.cancel_reason == "tenant deleted"
    # An error of its own after the cancel keeps its record (as in Go and Rust); the job is
    # CANCELLED all the same, never retried.
    assert [e.error_type for e in job.errors] == ["RuntimeError"]


async def test_after_a_cancel_a_handler_that_stops_ends_cancelled_one_that_finishes_completed(
    client: jobwire.Client, queue: str
) -> None:
    """The CancelLease contract: a Fail after the cancel ends the job CANCELLED (error type
    ``cancelled`` for the task's CancelledError), an Ack ("it finished anyway") COMPLETED."""
    for job_id in ("stops", "finishes", "sync-finishes"):
        await client.enqueue(queue, job_id, b"", job_id=job_id, max_attempts=3)
    worker = jobwire.Worker(client, [queue], concurrency=3, handle_signals=False)
    started: set[str] = set()
    seen: list[tuple[str, str | None]] = []

    @worker.handler("stops")
    async def stops(ctx: jobwire.JobContext) -> None:
        started.add(ctx.name)
        try:
            await asyncio.sleep(10)
        finally:
            seen.append((ctx.name, ctx.cancel_reason))

    @worker.handler("finishes")
    async def finishes(ctx: jobwire.JobContext) -> str:
        started.add(ctx.name)
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            seen.append((ctx.name, ctx.cancel_reason))
        await asyncio.sleep(0.05)  # still works after the cancel
        return "finished anyway"

    @worker.handler("sync-finishes")
    def sync_finishes(ctx: jobwire.JobContext) -> bytes:
        started.add(ctx.name)
        ctx.cancelled_sync.wait(10)
        seen.append((ctx.name, ctx.cancel_reason))
        return b"sync done"

    running = Running(worker)
    await eventually(lambda: asyncio.sleep(0, len(started) == 3), 15, "the handlers running")
    for job_id in ("stops", "finishes", "sync-finishes"):
        _, cancelled = await client.cancel_job(queue, job_id, "too slow")
        assert cancelled
    stopped = await wait_state(client, queue, "stops", pb.JOB_STATE_CANCELLED)
    finished = await wait_state(client, queue, "finishes", pb.JOB_STATE_COMPLETED)
    sync_finished = await wait_state(client, queue, "sync-finishes", pb.JOB_STATE_COMPLETED)
    await asyncio.sleep(0.3)  # a second run would start within this
    await running.stop()
    assert sorted(seen) == [("finishes", "too slow"), ("stops", "too slow"), ("sync-finishes", "too slow")]
    assert stopped.attempts_made == 1 and stopped.cancel_reason == "too slow" and stopped.result == b""
    assert [(e.error_type, e.message) for e in stopped.errors] == [("cancelled", "cancelled: too slow")]
    assert finished.attempts_made == 1 and finished.result == b"finished anyway" and not finished.errors
    assert sync_finished.attempts_made == 1 and sync_finished.result == b"sync done"
    assert worker.stats.settled == 3 and worker.stats.lost == 0


async def test_a_revoked_lease_raises_lease_lost_and_drops_the_result(
    client: jobwire.Client, queue: str
) -> None:
    await client.enqueue(queue, "reports", b"", job_id="r", max_attempts=3, delay=0.5)
    await client.queues.update_config(queue, pb.QueueConfig(cancel_grace=duration(0)), ["cancel_grace"])
    worker = jobwire.Worker(client, [queue], handle_signals=False)
    started = asyncio.Event()
    raised: list[BaseException] = []

    @worker.handler("reports")
    async def reports(ctx: jobwire.JobContext) -> str:
        await ctx.progress(5, "fine")
        started.set()
        # Ignores the cancel (keeps working); the lease is revoked at once (cancel_grace 0).
        try:
            for _ in range(100):
                await asyncio.sleep(0.05)
        except asyncio.CancelledError:
            pass
        for _ in range(100):
            try:
                await ctx.progress(6)
            except LeaseLost as e:
                raised.append(e)
                break
            await asyncio.sleep(0.05)
        return "dropped"

    running = Running(worker)
    await asyncio.wait_for(started.wait(), 15)
    await client.cancel_job(queue, "r")
    job = await wait_state(client, queue, "r", pb.JOB_STATE_CANCELLED)
    await eventually(lambda: asyncio.sleep(0, worker.stats.lost == 1), 10, "the result dropped")
    await running.stop()
    assert [type(e) for e in raised] == [LeaseLost]
    assert job.progress in (5, 6) and job.progress_message == "fine" and job.result == b""


async def test_cancel_jobs_pages_and_signals_active_jobs(client: jobwire.Client, queue: str) -> None:
    await client.enqueue(queue, "report", b"", job_id="active", metadata={"tenant": "t1"})
    worker = jobwire.Worker(client, [queue], handle_signals=False)
    started = asyncio.Event()

    @worker.handler("report")
    async def report(ctx: jobwire.JobContext) -> None:
        if ctx.job_id == "active":
            started.set()
            await asyncio.sleep(30)

    running = Running(worker)
    await asyncio.wait_for(started.wait(), 15)
    for i in range(3):
        await client.enqueue(queue, "report", b"", job_id=f"w{i}", metadata={"tenant": "t1"})
    await client.enqueue(queue, "report", b"", job_id="other", metadata={"tenant": "t2"})
    first = await client.cancel_jobs_page(queue, metadata_key="tenant", metadata_value="t1", limit=1)
    assert first.cancelled + first.signalled == 1 and first.next_page_token
    rest = await client.cancel_jobs(queue, metadata_key="tenant", metadata_value="t1", reason="t1 left")
    assert first.cancelled + rest.cancelled == 3 and first.signalled + rest.signalled == 1
    await wait_state(client, queue, "active", pb.JOB_STATE_CANCELLED)
    other = await client.get_job(queue, "other")  # leased once the slot freed, maybe
    assert other.state != pb.JOB_STATE_CANCELLED and not other.HasField("cancel_time")
    await running.stop()


async def test_delete_refuses_an_active_job_and_cancel_of_a_finished_one_changes_nothing(
    client: jobwire.Client, queue: str
) -> None:
    await client.enqueue(queue, "hold", b"", job_id="h")
    worker = jobwire.Worker(client, [queue], handle_signals=False)
    started = asyncio.Event()

    @worker.handler("hold")
    async def hold(ctx: jobwire.JobContext) -> str:
        started.set()
        await asyncio.sleep(0.5)
        return "held"

    running = Running(worker)
    await asyncio.wait_for(started.wait(), 15)
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await client.delete_job(queue, "h")
    assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    done = await wait_state(client, queue, "h", pb.JOB_STATE_COMPLETED)
    await running.stop()
    job, cancelled = await client.cancel_job(queue, "h", "too late")
    assert not cancelled and job.state == pb.JOB_STATE_COMPLETED and done.result == b"held"
    with pytest.raises(grpc.aio.AioRpcError) as missing:
        await client.cancel_job(queue, "nope")
    assert missing.value.code() == grpc.StatusCode.NOT_FOUND


def test_the_sync_client_has_job_control(jobwire_server: JobwireServer, queue: str) -> None:
    with jobwire.sync.Client(jobwire_server.target) as client:
        client.enqueue(queue, "n", b"", job_id="x", delay=3600, group_key="g")
        client.enqueue(queue, "n", b"", job_id="y", expire_at=datetime.now(timezone.utc) + timedelta(hours=1))
        job, cancelled = client.cancel_job(queue, "x", "why")
        assert cancelled and job.state == pb.JOB_STATE_CANCELLED
        assert client.delete_job(queue, "x") == pb.JOB_STATE_CANCELLED
        assert client.cancel_jobs(queue, name="n") == jobwire.CancelCount(1, 0)
        assert client.cancel_jobs_page(queue, name="n").cancelled == 0
