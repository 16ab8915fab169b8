"""Progress, checkpoints and results (issue 16) against a real server: reports the server
refuses, a sync handler's reports, a result over the server's limit, and a report left
unanswered by a stream that went silent (sent again with the unary ReportProgress)."""

from __future__ import annotations

import asyncio

import grpc

import jobwire
from jobwire import pb
from jobwire.errors import ReportRefused
from jobwire.testing import JobwireServer

from .conftest import Running
from .control_scenarios import wait_state
from .proxy import Proxy


async def test_refused_reports_raise_report_refused(client: jobwire.Client, queue: str) -> None:
    await client.enqueue(queue, "reports", b"", job_id="r")
    worker = jobwire.Worker(client, [queue], handle_signals=False)
    raised: list[BaseException] = []

    @worker.handler("reports")
    async def reports(ctx: jobwire.JobContext) -> None:
        for bad in (ctx.report(5, "x" * 300), ctx.report(checkpoint=b"x" * (64 * 1024 + 1))):
            try:
                await bad
            except ReportRefused as e:
                raised.append(e)
        await ctx.progress(7, "fine")

    running = Running(worker)
    job = await wait_state(client, queue, "r", pb.JOB_STATE_COMPLETED)
    await running.stop()
    first, second = raised
    assert isinstance(first, ReportRefused) and first.code == grpc.StatusCode.INVALID_ARGUMENT
    assert isinstance(second, ReportRefused) and second.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert job.progress == 7 and job.progress_message == "fine" and job.checkpoint == b""


async def test_a_sync_handler_reports_and_returns_a_result(client: jobwire.Client, queue: str) -> None:
    await client.enqueue(queue, "sync", b"", job_id="s")
    worker = jobwire.Worker(client, [queue], handle_signals=False)

    @worker.handler("sync")
    def sync(ctx: jobwire.JobContext) -> bytes:
        ctx.progress_sync(30, "a third")
        ctx.save_checkpoint_sync({"step": 1}, progress=60)
        return b"\x00done"

    running = Running(worker)
    job = await wait_state(client, queue, "s", pb.JOB_STATE_COMPLETED)
    await running.stop()
    assert (job.progress, job.progress_message, job.checkpoint) == (60, "a third", b'{"step":1}')
    assert job.result == b"\x00done"


async def test_a_result_over_the_limit_dead_letters_the_job(client: jobwire.Client, queue: str) -> None:
    await client.enqueue(queue, "big", b"", job_id="big", max_attempts=3)
    worker = jobwire.Worker(client, [queue], handle_signals=False)

    @worker.handler("big")
    async def big(ctx: jobwire.JobContext) -> bytes:
        return b"x" * (64 * 1024 + 1)

    running = Running(worker)
    job = await wait_state(client, queue, "big", pb.JOB_STATE_DEAD)
    await running.stop()
    assert job.attempts_made == 1 and job.dead_reason == pb.DEAD_REASON_NO_RETRY
    assert job.errors[-1].error_type == "result_too_large" and job.result == b""


async def test_a_report_the_stream_left_unanswered_goes_through_report_progress(
    server: JobwireServer, client: jobwire.Client, queue: str
) -> None:
    proxy = Proxy("127.0.0.1", server.grpc_port)
    await proxy.start()
    try:
        async with jobwire.Client(proxy.address, keepalive=1.0) as via_proxy:
            await client.enqueue(queue, "frozen", b"", job_id="f")
            worker = jobwire.Worker(via_proxy, [queue], handle_signals=False)
            started, go, reported = asyncio.Event(), asyncio.Event(), asyncio.Event()

            @worker.handler("frozen")
            async def frozen(ctx: jobwire.JobContext) -> None:
                started.set()
                await go.wait()
                await ctx.progress(50, "sent into a frozen stream")  # answered through the unary call
                reported.set()

            running = Running(worker)
            await asyncio.wait_for(started.wait(), 15)
            assert proxy.freeze() >= 1  # the stream's connection goes silent (no reset)
            go.set()
            await asyncio.wait_for(reported.wait(), 30)
            job = await wait_state(client, queue, "f", pb.JOB_STATE_COMPLETED, 30)
            await running.stop()
    finally:
        await proxy.close()
    assert (job.progress, job.progress_message) == (50, "sent into a frozen stream")
