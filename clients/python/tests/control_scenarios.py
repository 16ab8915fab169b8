"""The job-control scenarios of clients/conformance/scenarios.json (issue 16): a cancel reaching a
running handler, a checkpoint resuming the next attempt, a result attached at ack, cancel /
delete / expire from the client, and group keys with a group paused by a rate-limited handler.
test_conformance.py runs them with the others."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import jobwire
from jobwire import pb
from jobwire.testing import JobwireServer

from .conftest import Running, eventually

Scenario = dict[str, Any]


async def wait_state(
    client: jobwire.Client, queue: str, job_id: str, state: pb.JobState.ValueType, timeout: float = 15
) -> pb.Job:
    job = pb.Job()

    async def probe() -> bool:
        nonlocal job
        job = await client.get_job(queue, job_id)
        return job.state == state

    await eventually(probe, timeout, f"{job_id} in {pb.JobState.Name(state)}")
    return job


async def cancel_reaches_running_handler(sc: Scenario, tmp: Path, q: str) -> None:
    p = sc["params"]
    with JobwireServer(tmp, sc["server"]) as server:
        async with jobwire.Client(server.target) as client:
            await client.enqueue(q, "long", b"", job_id="c", max_attempts=3)
            worker = jobwire.Worker(client, [q], handle_signals=False)
            started = asyncio.Event()
            calls: list[int] = []
            stopped: list[tuple[float, str | None]] = []

            @worker.handler("long")
            async def long(ctx: jobwire.JobContext) -> None:
                calls.append(ctx.attempt)
                started.set()
                # The SDK sets ctx.cancelled and cancels this task: either ends the wait.
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.wait_for(ctx.cancelled.wait(), 10)
                stopped.append((time.monotonic(), ctx.cancel_reason))
                # Stops because of the cancel (returning would say it finished anyway: an ack).
                raise asyncio.CancelledError

            run = Running(worker)
            await asyncio.wait_for(started.wait(), 15)
            asked = time.monotonic()
            job, cancelled = await client.cancel_job(q, "c", p["reason"])
            assert cancelled
            assert job.state in (pb.JOB_STATE_ACTIVE, pb.JOB_STATE_CANCELLED), job
            job = await wait_state(client, q, "c", pb.JOB_STATE_CANCELLED)
            await asyncio.sleep(0.5)  # a second run would start within this
            await run.stop()
    assert calls == [1]
    [(at, reason)] = stopped
    assert (at - asked) * 1000 <= p["max_signal_ms"], at - asked
    assert reason == p["reason"]
    assert job.cancel_reason == p["reason"] and job.HasField("cancel_time")
    assert worker.stats.settled == 1 and worker.stats.lost == 0


async def checkpoint_resumes_next_attempt(sc: Scenario, tmp: Path, q: str) -> None:
    p = sc["params"]
    with JobwireServer(tmp, sc["server"]) as server:
        async with jobwire.Client(server.target) as client:
            await client.enqueue(q, "resumable", b"", job_id="r", max_attempts=2)
            worker = jobwire.Worker(client, [q], handle_signals=False)
            seen: list[tuple[int, bytes]] = []

            @worker.handler("resumable")
            async def resumable(ctx: jobwire.JobContext) -> None:
                seen.append((ctx.attempt, ctx.checkpoint))
                if ctx.attempt == 1:
                    await ctx.progress(p["first_progress"], "step 1 done")
                    await ctx.save_checkpoint(p["checkpoint"])
                    assert ctx.checkpoint == p["checkpoint"].encode()
                    raise jobwire.RetryAfter(0.1, "provider hiccup")
                await ctx.progress(100, "all steps done")

            run = Running(worker)
            job = await wait_state(client, q, "r", pb.JOB_STATE_COMPLETED)
            await run.stop()
    assert seen == [(1, b""), (2, p["checkpoint"].encode())]
    assert job.attempts_made == 2
    assert job.progress == 100 and job.progress_message == "all steps done"
    assert job.checkpoint == p["checkpoint"].encode()
    assert job.HasField("progress_time")


async def result_attached_at_ack(sc: Scenario, tmp: Path, q: str) -> None:
    p = sc["params"]
    with JobwireServer(tmp, sc["server"]) as server:
        async with jobwire.Client(server.target) as client:
            await client.enqueue(q, "answer", b"", job_id="a")
            worker = jobwire.Worker(client, [q], handle_signals=False)

            @worker.handler("answer")
            async def answer(ctx: jobwire.JobContext) -> str:
                return str(p["result"])  # returned bytes or str are the job's result

            run = Running(worker)
            job = await wait_state(client, q, "a", pb.JOB_STATE_COMPLETED)
            await run.stop()
    assert job.result == p["result"].encode()


async def cancel_delete_expire_from_client(sc: Scenario, tmp: Path, q: str) -> None:
    p = sc["params"]
    with JobwireServer(tmp, sc["server"]) as server:
        async with jobwire.Client(server.target) as client:
            await client.enqueue(q, "later", b"", job_id="d", delay=3600)
            job, cancelled = await client.cancel_job(q, "d", "not needed")
            assert cancelled and job.state == pb.JOB_STATE_CANCELLED, job
            assert job.cancel_reason == "not needed"
            assert await client.delete_job(q, "d") == pb.JOB_STATE_CANCELLED
            again = await client.enqueue(q, "later", b"", job_id="d", delay=3600)
            assert again.created and again.job.state == pb.JOB_STATE_DELAYED

            await client.enqueue(q, "short-lived", b"", job_id="t", ttl=p["ttl_ms"] / 1000)
            assert (await client.get_job(q, "t")).HasField("expire_time")
            expired = await wait_state(client, q, "t", pb.JOB_STATE_EXPIRED, p["wait_ms"] / 1000)

            for i in range(3):
                await client.enqueue(q, "newsletter", b"", job_id=f"n{i}")
            for i in range(2):
                await client.enqueue(q, "invoice", b"", job_id=f"i{i}")
            count = await client.cancel_jobs(q, name="newsletter", reason="campaign stopped", limit=2)
            news = [await client.get_job(q, f"n{i}") for i in range(3)]
            invoices = [await client.get_job(q, f"i{i}") for i in range(2)]
    assert expired.state == pb.JOB_STATE_EXPIRED and expired.attempts_made == 0
    assert count == jobwire.CancelCount(cancelled=3, signalled=0)
    assert all(j.state == pb.JOB_STATE_CANCELLED and j.cancel_reason == "campaign stopped" for j in news)
    assert all(j.state == pb.JOB_STATE_WAITING for j in invoices)


async def group_key_and_pause_group(sc: Scenario, tmp: Path, q: str) -> None:
    p = sc["params"]
    pause = p["pause_ms"] / 1000
    with JobwireServer(tmp, sc["server"]) as server:
        async with jobwire.Client(server.target) as client:
            await client.enqueue(q, "call", b"", job_id="a1", group_key="tenant-a")
            assert (await client.get_job(q, "a1")).group_key == "tenant-a"
            worker = jobwire.Worker(client, [q], concurrency=2, handle_signals=False)
            leased: dict[str, list[float]] = {}
            limited = asyncio.Event()
            limited_at = 0.0

            @worker.handler("call")
            async def call(ctx: jobwire.JobContext) -> None:
                nonlocal limited_at
                leased.setdefault(ctx.job_id, []).append(time.monotonic())
                if ctx.job_id == "a1" and not limited.is_set():
                    limited_at = time.monotonic()
                    limited.set()
                    raise jobwire.RateLimited(pause, "429 for tenant-a", pause_group=True)

            run = Running(worker)
            await asyncio.wait_for(limited.wait(), 15)
            await asyncio.sleep(0.1)  # the Fail is applied well before this
            await client.enqueue(q, "call", b"", job_id="a2", group_key="tenant-a")
            await client.enqueue(q, "call", b"", job_id="b1", group_key="tenant-b")
            b1 = await wait_state(client, q, "b1", pb.JOB_STATE_COMPLETED, pause)
            a1_then = await client.get_job(q, "a1")
            a2_then = await client.get_job(q, "a2")
            a1 = await wait_state(client, q, "a1", pb.JOB_STATE_COMPLETED)
            a2 = await wait_state(client, q, "a2", pb.JOB_STATE_COMPLETED)
            await run.stop()
    assert b1.group_key == "tenant-b" and a2.group_key == "tenant-a"
    assert a1_then.state != pb.JOB_STATE_COMPLETED and a2_then.state == pb.JOB_STATE_WAITING
    assert leased["b1"][0] - limited_at < pause
    # tenant-a leased nothing during its pause: its retry and the job enqueued meanwhile both
    # started after it.
    assert min(leased["a1"][1], leased["a2"][0]) - limited_at >= pause
    assert a1.attempts_made == 1 and a1.errors[-1].disposition == pb.FAIL_DISPOSITION_RATE_LIMITED


CONTROL_SCENARIOS: dict[str, Callable[[Scenario, Path, str], Awaitable[None]]] = {
    f.__name__: f
    for f in (
        cancel_reaches_running_handler,
        checkpoint_resumes_next_attempt,
        result_attached_at_ack,
        cancel_delete_expire_from_client,
        group_key_and_pause_group,
    )
}
"""Scenario id -> its test (the scenario, a scratch dir, a fresh queue name)."""
