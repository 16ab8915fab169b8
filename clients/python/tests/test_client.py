"""The producer client against a real server: enqueue and its options, batches, reads, the
dead-letter and queue wrappers, the sync facade, errors."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from pathlib import Path

import grpc
import grpc.aio
import pytest

import jobwire
import jobwire.sync
from jobwire import pb
from jobwire.testing import JobwireServer, RedisServer, free_port


async def test_enqueue_json_payload_and_options(client: jobwire.Client, queue: str) -> None:
    resp = await client.enqueue(
        queue,
        "send-email",
        {"to": "a@example.com"},
        job_id="welcome:1",
        delay=timedelta(hours=1),
        priority=5,
        max_attempts=4,
        metadata={"tenant": "t1"},
        timeout=30,
        backoff=jobwire.Backoff("exponential", delay=0.5, jitter=1.0, max_delay=10),
    )
    assert resp.created
    job = await client.get_job(queue, "welcome:1")
    assert job.name == "send-email" and job.content_type == "application/json"
    assert json.loads(job.payload) == {"to": "a@example.com"}
    assert job.state == pb.JOB_STATE_DELAYED and job.priority == 5 and job.max_attempts == 4
    assert dict(job.metadata) == {"tenant": "t1"}
    assert job.backoff.kind == pb.BACKOFF_KIND_EXPONENTIAL and job.backoff.jitter == 1.0
    assert job.backoff.delay.ToMilliseconds() == 500 and job.backoff.max_delay.ToMilliseconds() == 10_000
    assert job.timeout.ToMilliseconds() == 30_000


async def test_enqueue_with_a_job_id_is_idempotent(client: jobwire.Client, queue: str) -> None:
    first = await client.enqueue(queue, "n", b"one", job_id="same")
    second = await client.enqueue(queue, "n", b"two", job_id="same")
    assert first.created and not second.created
    assert second.job.payload == b"one"


async def test_bytes_and_str_payloads(client: jobwire.Client, queue: str) -> None:
    raw = await client.enqueue(queue, "n", b"\x00\x01")
    text = await client.enqueue(queue, "n", "héllo")
    assert raw.job.payload == b"\x00\x01" and raw.job.content_type == ""
    assert text.job.payload == "héllo".encode() and text.job.content_type.startswith("text/plain")
    assert raw.job.job_id and raw.job.job_id != text.job.job_id  # server-made ids


async def test_enqueue_batch_reports_per_item(client: jobwire.Client, queue: str) -> None:
    results = await client.enqueue_batch(
        [
            jobwire.job_spec(queue, "n", {"i": 1}, job_id="b1"),
            jobwire.job_spec(
                queue, "n", b"x", job_id="b2", backoff=jobwire.Backoff("fixed", delay=1, jitter=2.0)
            ),
            jobwire.job_spec(queue, "n", b"y", job_id="b1"),
        ]
    )
    assert [r.created for r in results] == [True, False, False]
    assert not results[0].HasField("error")
    assert results[1].error.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert "jitter" in results[1].error.field
    assert results[2].job.job_id == "b1" and not results[2].HasField("error")


async def test_get_job_not_found_raises_the_status(client: jobwire.Client, queue: str) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await client.get_job(queue, "nope")
    assert err.value.code() == grpc.StatusCode.NOT_FOUND


async def test_invalid_argument_is_not_retried(client: jobwire.Client) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await client.enqueue("bad queue name!", "n", b"", job_id="x")
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_unavailable_enqueue_with_id_is_retried_until_the_server_is_back(tmp_path: Path) -> None:
    with (
        RedisServer(tmp_path / "redis") as redis,
        JobwireServer(tmp_path / "s", redis_url=redis.url) as server,
    ):
        # A restart outlasts the default 5 tries (about 1.5 s): this client tries longer.
        async with jobwire.Client(server.target, unavailable_tries=40) as c:
            await c.enqueue("q-retry", "n", b"", job_id="before")
            server.kill()
            restart = asyncio.get_running_loop().run_in_executor(None, server.start)
            resp = await c.enqueue("q-retry", "n", b"", job_id="during")
            await restart
            assert resp.created
            assert (await c.get_job("q-retry", "during")).job_id == "during"


async def test_unavailable_is_tried_five_times_with_full_jitter_capped_at_2s(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from jobwire import _backoff

    sleeps: list[float] = []

    async def no_sleep(delay: float) -> None:
        sleeps.append(delay)

    monkeypatch.setattr(asyncio, "sleep", no_sleep)
    calls = 0

    async def unavailable() -> None:
        nonlocal calls
        calls += 1
        raise grpc.aio.AioRpcError(
            grpc.StatusCode.UNAVAILABLE, grpc.aio.Metadata(), grpc.aio.Metadata(), "down"
        )

    with pytest.raises(grpc.aio.AioRpcError):
        await _backoff.retry_unavailable(unavailable)
    assert calls == 5 and len(sleeps) == 4
    assert all(0 <= d <= min(2.0, 0.1 * 2**n) for n, d in enumerate(sleeps)), sleeps
    calls, sleeps[:] = 0, []
    with pytest.raises(grpc.aio.AioRpcError):
        await _backoff.retry_unavailable(unavailable, tries=1)
    assert calls == 1 and sleeps == []


async def test_enqueue_with_id_to_a_closed_port_gives_up_after_its_tries() -> None:
    # Before: retried for the 30 s of the client's timeout (29.6 s to a closed port).
    async with jobwire.Client(f"127.0.0.1:{free_port()}") as c:
        started = asyncio.get_running_loop().time()
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await c.enqueue("emails", "send-welcome", b"", job_id="welcome:ada")
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE
        assert asyncio.get_running_loop().time() - started < 10


async def test_queue_and_dead_letter_wrappers(client: jobwire.Client, queue: str) -> None:
    await client.enqueue(queue, "n", b"", job_id="j1")
    await client.queues.pause(queue)
    stats = await client.queues.stats(queue)
    assert stats.paused and stats.waiting == 1
    assert queue in [q.queue for q in await client.queues.list()]
    await client.queues.resume(queue)
    assert not (await client.queues.stats(queue)).paused
    config = await client.queues.update_config(
        queue, pb.QueueConfig(default_max_attempts=7), ["default_max_attempts"]
    )
    assert config.default_max_attempts == 7
    assert (await client.queues.get_config(queue)).default_max_attempts == 7
    assert await client.dead_letters.list(queue) == []
    replay = await client.dead_letters.replay(queue, ["j1"])
    assert list(replay.skipped_job_ids) == ["j1"]
    assert await client.queues.purge(queue) == 1


async def test_list_jobs_pages_and_list_workers_shows_the_stream(client: jobwire.Client, queue: str) -> None:
    for job_id, priority in [("a", 0), ("b", 0), ("hi", 5)]:
        await client.enqueue(queue, "x", b"payload", job_id=job_id, priority=priority)
    # Lease order over two pages: the priority-5 job first, then FIFO; no payloads.
    first = await client.list_jobs(queue, pb.JOB_STATE_WAITING, page_size=2)
    assert [j.job_id for j in first.jobs] == ["hi", "a"]
    assert first.jobs[0].payload == b""
    token = first.next_page_token
    second = await client.list_jobs(queue, pb.JOB_STATE_WAITING, page_size=2, page_token=token)
    assert [j.job_id for j in second.jobs] == ["b"]
    assert [j.job_id async for j in client.iterate_jobs(queue, pb.JOB_STATE_WAITING)] == ["hi", "a", "b"]
    other = pb.ListJobsFilter(name="other")
    assert (await client.list_jobs(queue, pb.JOB_STATE_WAITING, filter=other)).jobs == []
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await client.list_jobs(queue, pb.JOB_STATE_UNSPECIFIED)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT

    idle = f"{queue}-idle"
    worker = jobwire.Worker(client, [idle], concurrency=3, worker_id="py-lister", handle_signals=False)

    @worker.handler("x")
    async def nothing(ctx: jobwire.JobContext) -> None:
        return None

    task = asyncio.create_task(worker.run())
    try:
        streams: list[pb.WorkerStream] = []

        async def listed() -> bool:
            streams[:] = (await client.list_workers(idle)).streams
            return len(streams) == 1

        deadline = asyncio.get_running_loop().time() + 15
        while not await listed():
            assert asyncio.get_running_loop().time() < deadline, "the worker's stream was never listed"
            await asyncio.sleep(0.05)
        s = streams[0]
        assert (s.worker_id, list(s.queues), s.credits, s.held_leases) == ("py-lister", [idle], 3, 0)
        assert s.stream_id.startswith(f"{s.replica_id}/")
    finally:
        worker.stop()
        await asyncio.wait_for(task, 30)


def test_sync_client(server: JobwireServer, queue: str) -> None:
    with jobwire.sync.Client(server.target) as c:
        c.wait_ready()
        assert c.enqueue(queue, "n", [1, 2], job_id="s1").created
        assert json.loads(c.get_job(queue, "s1").payload) == [1, 2]
        assert c.queues.stats(queue).waiting == 1
        assert c.dead_letters.list(queue) == []
        assert [j.job_id for j in c.list_jobs(queue, pb.JOB_STATE_WAITING).jobs] == ["s1"]
        assert list(c.list_workers(queue).streams) == []
        with pytest.raises(grpc.RpcError) as err:
            c.get_job(queue, "missing")
        assert err.value.code() == grpc.StatusCode.NOT_FOUND
    channel = jobwire.sync.connect(server.target)
    try:
        job = pb.JobServiceStub(channel).GetJob(pb.GetJobRequest(queue=queue, job_id="s1"), timeout=10).job
        assert job.job_id == "s1"
    finally:
        channel.close()
