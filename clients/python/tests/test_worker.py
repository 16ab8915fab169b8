"""The worker against a real server: handlers of both kinds, the context, the error mapping,
shutdown with a grace, refusals, and the sync facade."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest

import jobwire
import jobwire.sync
from jobwire import pb
from jobwire.testing import JobwireServer

from .conftest import Running, eventually
from .proxy import Proxy


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


async def test_async_and_sync_handlers_get_the_context(client: jobwire.Client, queue: str) -> None:
    await client.enqueue(queue, "async-job", {"n": 1}, job_id="a", metadata={"k": "v"})
    await client.enqueue(queue, "sync-job", b"raw", job_id="s")
    worker = jobwire.Worker(client, [queue], concurrency=2, worker_id="w-ctx", handle_signals=False)
    seen: dict[str, tuple[object, ...]] = {}

    @worker.handler("async-job")
    async def on_async(ctx: jobwire.JobContext) -> None:
        seen["a"] = (
            ctx.json(),
            ctx.attempt,
            ctx.idempotency_key,
            ctx.metadata,
            ctx.job_id,
            ctx.queue,
            ctx.worker_id,
            ctx.cancelled.is_set(),
        )

    @worker.handler("sync-job")
    def on_sync(ctx: jobwire.JobContext) -> None:
        seen["s"] = (ctx.payload, threading.current_thread() is not threading.main_thread())

    running = Running(worker)
    await wait_state(client, queue, "a", pb.JOB_STATE_COMPLETED)
    await wait_state(client, queue, "s", pb.JOB_STATE_COMPLETED)
    await running.stop()
    assert seen["a"] == (
        {"n": 1},
        1,
        (await client.get_job(queue, "a")).idempotency_key,
        {"k": "v"},
        "a",
        queue,
        "w-ctx",
        False,
    )
    assert seen["a"][2]  # a non-empty idempotency key
    assert seen["s"] == (b"raw", True)


async def test_plain_exception_retries_with_type_message_and_traceback(
    client: jobwire.Client, queue: str
) -> None:
    await client.enqueue(queue, "boom", b"", job_id="b", max_attempts=2)
    worker = jobwire.Worker(client, [queue], handle_signals=False)
    attempts: list[int] = []

    class ProviderDown(Exception):
        pass

    @worker.handler("boom")
    async def boom(ctx: jobwire.JobContext) -> None:
        attempts.append(ctx.attempt)
        raise ProviderDown("503 from the provider")

    running = Running(worker)
    job = await wait_state(client, queue, "b", pb.JOB_STATE_DEAD)
    await running.stop()
    assert attempts == [1, 2]
    assert job.dead_reason == pb.DEAD_REASON_ATTEMPTS_EXHAUSTED
    err = job.errors[-1]
    assert err.error_type == "ProviderDown" and err.message == "503 from the provider"
    assert err.disposition == pb.FAIL_DISPOSITION_RETRY
    assert "Traceback" in err.details and "raise ProviderDown" in err.details
    assert err.worker_id == worker.worker_id


async def test_unknown_job_name_is_failed_for_retry(client: jobwire.Client, queue: str) -> None:
    await client.enqueue(queue, "nobody-handles-this", b"", job_id="u", max_attempts=1)
    worker = jobwire.Worker(client, [queue], handle_signals=False)
    running = Running(worker)
    job = await wait_state(client, queue, "u", pb.JOB_STATE_DEAD)
    await running.stop()
    assert job.errors[-1].error_type == "no_handler"


async def test_grace_end_cancels_and_hands_back_without_waiting(client: jobwire.Client, queue: str) -> None:
    await client.enqueue(queue, "slow", b"", job_id="slow", max_attempts=3)
    await client.enqueue(queue, "slow-sync", b"", job_id="slow-sync", max_attempts=3)
    worker = jobwire.Worker(client, [queue], concurrency=2, grace=0.5, handle_signals=False)
    cancelled = asyncio.Event()
    sync_saw_cancel = threading.Event()

    @worker.handler("slow")
    async def slow(ctx: jobwire.JobContext) -> None:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    @worker.handler("slow-sync")
    def slow_sync(ctx: jobwire.JobContext) -> None:
        if ctx.cancelled_sync.wait(60):
            sync_saw_cancel.set()

    running = Running(worker)
    await eventually(lambda: asyncio.sleep(0, worker.running == 2), what="both jobs running")
    started = time.monotonic()
    await running.stop()
    assert time.monotonic() - started < 10
    assert cancelled.is_set()
    await eventually(
        lambda: asyncio.sleep(0, sync_saw_cancel.is_set()), what="the sync handler saw the cancel"
    )
    for job_id in ("slow", "slow-sync"):
        job = await client.get_job(queue, job_id)
        # Handed back uncharged (RELEASE): waiting again, the attempt not counted, no error.
        assert job.state == pb.JOB_STATE_WAITING and job.attempts_made == 0, job
        assert not job.errors


async def test_subscribe_refusal_raises(client: jobwire.Client) -> None:
    worker = jobwire.Worker(client, ["not a valid queue!"], handle_signals=False)
    with pytest.raises(jobwire.SubscribeRefused) as err:
        await asyncio.wait_for(worker.run(), 10)
    assert err.value.code.name == "INVALID_ARGUMENT"


def test_grace_must_be_positive(client: jobwire.Client) -> None:
    with pytest.raises(ValueError):
        jobwire.Worker(client, ["q"], grace=0)


def test_sync_worker_runs_until_stopped(server: JobwireServer, queue: str) -> None:
    with jobwire.sync.Client(server.target) as c:
        for i in range(5):
            c.enqueue(queue, "add", {"i": i}, job_id=f"j{i}")
        worker = jobwire.sync.Worker(c, [queue], concurrency=2, handle_signals=False)
        done: list[int] = []
        lock = threading.Lock()

        @worker.handler("add")
        def add(ctx: jobwire.JobContext) -> None:
            with lock:
                done.append(ctx.json()["i"])
                if len(done) == 5:
                    threading.Timer(0.2, worker.stop).start()

        worker.run()
        assert sorted(done) == [0, 1, 2, 3, 4]
        assert all(c.get_job(queue, f"j{i}").state == pb.JOB_STATE_COMPLETED for i in range(5))


async def test_server_draining_stops_leases_then_the_worker_reconnects(tmp_path: Path) -> None:
    # --max-connection-age retires each connection after 1 s: its streams get Draining, may
    # settle what they hold, and are ended; the worker finishes its job and comes back.
    args = ["--max-connection-age", "1s", "--max-connection-age-grace", "10s"]
    with JobwireServer(tmp_path / "s", args) as server:
        async with jobwire.Client(server.target) as client:
            await client.enqueue("drain-q", "slow", b"", job_id="first")
            worker = jobwire.Worker(client, ["drain-q"], handle_signals=False)
            seen: list[tuple[str, int]] = []

            @worker.handler("slow")
            async def slow(ctx: jobwire.JobContext) -> None:
                seen.append((ctx.job_id, ctx.attempt))
                if ctx.job_id == "first":
                    await asyncio.sleep(2)

            running = Running(worker)
            await wait_state(client, "drain-q", "first", pb.JOB_STATE_COMPLETED)
            await client.enqueue("drain-q", "slow", b"", job_id="second")
            second = await wait_state(client, "drain-q", "second", pb.JOB_STATE_COMPLETED)
            await running.stop()
            first = await client.get_job("drain-q", "first")
    assert seen == [("first", 1), ("second", 1)]
    assert first.attempts_made == 1 and second.attempts_made == 1
    assert worker.stats.server_drains >= 1 and worker.stats.reconnects >= 1
    assert worker.stats.lost == 0 and worker.stats.extended == 0


async def test_a_black_holed_connection_is_replaced(
    server: JobwireServer, client: jobwire.Client, queue: str
) -> None:
    # The proxy stops forwarding without closing anything: the ack gets no Settled reply, the
    # stall watchdog drops the stream, keepalive closes the dead connection, and the result
    # goes through a new one as a unary Ack.
    proxy = Proxy("127.0.0.1", server.grpc_port)
    await proxy.start()
    try:
        await client.enqueue(queue, "work", b"", job_id="bh")
        async with jobwire.Client(proxy.address, timeout=5, keepalive=4.0) as proxied:
            worker = jobwire.Worker(proxied, [queue], stall_timeout=2.0, handle_signals=False)
            started = asyncio.Event()
            calls: list[int] = []

            @worker.handler("work")
            async def work(ctx: jobwire.JobContext) -> None:
                calls.append(ctx.attempt)
                started.set()
                await asyncio.sleep(0.5)

            running = Running(worker)
            await asyncio.wait_for(started.wait(), 15)
            assert proxy.freeze() >= 1
            job = await wait_state(client, queue, "bh", pb.JOB_STATE_COMPLETED, timeout=25)
            await eventually(lambda: asyncio.sleep(0, worker.stats.reconnects >= 1), 15, "a new stream")
            await running.stop()
    finally:
        await proxy.close()
    assert calls == [1] and job.attempts_made == 1
    assert worker.stats.settled == 1 and worker.stats.lost == 0
    assert proxy.connections >= 2


async def test_a_lost_lease_cancels_the_handler_and_drops_its_result(tmp_path: Path) -> None:
    # The worker's connection goes silent (a frozen proxy): the server ends the silent stream
    # after --heartbeat-timeout, the lease expires (attempt 1 failed, LEASE_EXPIRED) and another
    # worker runs attempt 2. When the first worker is back (keepalive replaced the dead
    # connection, slower than the 1 s lease), ExtendLease answers that the lease is lost: its
    # handler is cancelled and whatever it returns is dropped, never acked over attempt 2.
    args = ["--lease-duration", "1s", "--heartbeat-timeout", "1s", "--reaper-interval", "100ms"]
    with JobwireServer(tmp_path / "s", args) as server:
        proxy = Proxy("127.0.0.1", server.grpc_port)
        await proxy.start()
        try:
            async with (
                jobwire.Client(server.target) as direct,
                jobwire.Client(proxy.address, keepalive=12.0, timeout=5) as proxied,
            ):
                await direct.enqueue("lost-q", "work", b"", job_id="l1", max_attempts=3)
                first = jobwire.Worker(proxied, ["lost-q"], stall_timeout=30, handle_signals=False)
                cancelled = asyncio.Event()

                @first.handler("work")
                async def hold(ctx: jobwire.JobContext) -> None:
                    proxy.freeze()
                    await asyncio.wait_for(ctx.cancelled.wait(), 30)
                    cancelled.set()

                running_first = Running(first)

                async def expired() -> bool:
                    job = await direct.get_job("lost-q", "l1")
                    return job.state == pb.JOB_STATE_WAITING and job.attempts_made == 1

                await eventually(expired, 20, "attempt 1 expired")
                job = await direct.get_job("lost-q", "l1")
                assert job.errors[-1].error_type == "LEASE_EXPIRED"
                second = jobwire.Worker(direct, ["lost-q"], handle_signals=False)
                attempts: list[int] = []

                @second.handler("work")
                async def finish(ctx: jobwire.JobContext) -> None:
                    attempts.append(ctx.attempt)
                    await asyncio.wait_for(cancelled.wait(), 30)  # the first one gives up first

                running_second = Running(second)
                done = await wait_state(direct, "lost-q", "l1", pb.JOB_STATE_COMPLETED, timeout=40)
                await running_second.stop()
                await running_first.stop()
        finally:
            await proxy.close()
    assert attempts == [2] and done.attempts_made == 2
    assert first.stats.lost == 1 and first.stats.settled == 0
    # The second worker's first lease shortened its heartbeat period at once (a 1 s lease and
    # --heartbeat-timeout), so the server never found its stream silent.
    assert second.stats.reconnects == 0 and second.stats.settled == 1
