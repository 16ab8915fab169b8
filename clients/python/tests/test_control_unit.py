"""Job control (issue 16) in the SDK without a server (jobwire.testing.run_handler): results,
progress reports and checkpoints, RateLimited(pause_group), the report errors, and the enqueue
options group_key / expire_at / ttl."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone

import grpc
import pytest

import jobwire
from jobwire import pb
from jobwire.errors import LeaseLost, ReportRefused, fail_request, report_error
from jobwire.testing import run_handler, run_handler_sync


async def test_returned_bytes_or_str_become_the_result_and_set_result_wins() -> None:
    async def returns_str(ctx: jobwire.JobContext) -> str:
        return "done:42"

    def returns_bytes(ctx: jobwire.JobContext) -> bytes:
        return b"\x00\x01"

    async def returns_other(ctx: jobwire.JobContext) -> int:
        return 7  # not a result: ignored

    async def sets_json(ctx: jobwire.JobContext) -> str:
        ctx.set_result({"rows": 3})
        return "ignored: set_result came first"

    assert (await run_handler(returns_str)).result == b"done:42"
    assert (await run_handler(returns_bytes)).result == b"\x00\x01"
    assert (await run_handler(returns_other)).result is None
    assert (await run_handler(sets_json)).result == b'{"rows":3}'


async def test_a_failed_attempt_carries_no_result() -> None:
    async def fails(ctx: jobwire.JobContext) -> None:
        ctx.set_result("half")
        raise RuntimeError("boom")

    outcome = await run_handler(fails)
    assert outcome.disposition == "RETRY" and outcome.result is None


async def test_progress_and_checkpoints_are_recorded_and_the_last_checkpoint_is_seen() -> None:
    seen: list[bytes] = []

    async def handler(ctx: jobwire.JobContext) -> None:
        seen.append(ctx.checkpoint)
        await ctx.progress(10, "started")
        await ctx.save_checkpoint({"page": 2}, progress=40)
        seen.append(ctx.checkpoint)
        await ctx.report(message="only the message")

    outcome = await run_handler(handler, checkpoint=b"page=1")
    assert seen == [b"page=1", b'{"page":2}']
    assert outcome.checkpoint == b'{"page":2}'
    first, second, third = outcome.reports
    assert (first.progress, first.message, first.HasField("checkpoint")) == (10, "started", False)
    assert (second.progress, second.HasField("message"), second.checkpoint) == (40, False, b'{"page":2}')
    assert (third.HasField("progress"), third.message) == (False, "only the message")
    assert first.queue == "test" and first.job_id == "job-1" and first.lease_token == "fake-token"


def test_a_sync_handler_reports_through_the_sync_twins() -> None:
    def handler(ctx: jobwire.JobContext) -> bytes:
        ctx.progress_sync(50, "half")
        ctx.save_checkpoint_sync(b"cp")
        ctx.report_sync(100)
        return b"ok"

    outcome = run_handler_sync(handler)
    assert [r.progress for r in outcome.reports] == [50, 0, 100]
    assert outcome.checkpoint == b"cp" and outcome.result == b"ok"


async def test_bad_progress_is_refused_before_sending_and_sync_twins_refuse_the_loop() -> None:
    errors: list[BaseException] = []

    async def handler(ctx: jobwire.JobContext) -> None:
        for percent in (101, -1):
            try:
                await ctx.progress(percent)
            except ValueError as e:
                errors.append(e)
        try:
            ctx.progress_sync(5)  # would block the event loop it needs
        except RuntimeError as e:
            errors.append(e)

    outcome = await run_handler(handler)
    assert outcome.acked and not outcome.reports
    assert [type(e) for e in errors] == [ValueError, ValueError, RuntimeError]


def test_rate_limited_pause_group_is_sent_as_such() -> None:
    req = fail_request(jobwire.RateLimited(1.5, "429 for tenant-a", pause_group=True))
    assert req.disposition == pb.FAIL_DISPOSITION_RATE_LIMITED
    assert req.pause_group and not req.pause_queue
    assert req.retry_after.ToMilliseconds() == 1500
    assert not fail_request(jobwire.RateLimited(1)).pause_group


def test_refused_reports_map_to_lease_lost_or_report_refused() -> None:
    assert isinstance(report_error(grpc.StatusCode.FAILED_PRECONDITION, "lease lost"), LeaseLost)
    assert isinstance(report_error(grpc.StatusCode.NOT_FOUND, "no job"), LeaseLost)
    refused = report_error(grpc.StatusCode.RESOURCE_EXHAUSTED, "checkpoint over 65536 bytes")
    assert isinstance(refused, ReportRefused) and refused.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "checkpoint over 65536 bytes" in str(refused)


def test_job_spec_group_key_expire_at_and_ttl() -> None:
    at = datetime(2030, 1, 2, 3, 4, 5, tzinfo=timezone(timedelta(hours=2)))
    spec = jobwire.job_spec("q", "n", group_key="tenant-a", expire_at=at)
    assert spec.group_key == "tenant-a"
    assert spec.expire_time.ToDatetime(tzinfo=timezone.utc) == at
    assert not spec.HasField("ttl")
    spec = jobwire.job_spec("q", "n", ttl=timedelta(minutes=5))
    assert spec.ttl.ToSeconds() == 300 and not spec.HasField("expire_time") and spec.group_key == ""
    with pytest.raises(ValueError, match="not both"):
        jobwire.job_spec("q", "n", expire_at=at, ttl=5)
    with pytest.raises(ValueError, match="timezone-aware"):
        jobwire.job_spec("q", "n", expire_at=datetime(2030, 1, 1))


async def test_run_handler_can_cancel_the_job_like_cancel_job() -> None:
    seen: list[str | None] = []

    async def waits(ctx: jobwire.JobContext) -> None:
        try:
            await asyncio.sleep(10)
        finally:
            seen.append(ctx.cancel_reason)

    def polls(ctx: jobwire.JobContext) -> str:
        ctx.cancelled_sync.wait(10)
        seen.append(ctx.cancel_reason)
        return "finished anyway"

    async def catches(ctx: jobwire.JobContext) -> str:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            seen.append(ctx.cancel_reason)
        return "finished anyway"

    # Stopped by the cancel (its CancelledError out): the cancelled Fail.
    outcome = await run_handler(waits, cancel_after=0.05, cancel_reason="customer left")
    assert outcome.disposition == "NO_RETRY" and outcome.fail is not None and outcome.result is None
    assert outcome.fail.error.error_type == "cancelled"
    assert outcome.fail.error.message == "cancelled: customer left"
    # Returned after the cancel: a success with its result (the worker acks it: COMPLETED).
    for handler in (polls, catches):
        outcome = await run_handler(handler, cancel_after=0.05, cancel_reason="customer left")
        assert outcome.fail is None and outcome.result == b"finished anyway", outcome
    assert seen == ["customer left"] * 3
