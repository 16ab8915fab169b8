"""jobwire.testing.run_handler: a handler on a fake lease, no server; the error mapping."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

import jobwire
from jobwire import pb
from jobwire.errors import MAX_DETAILS_BYTES, MAX_ERROR_TYPE_BYTES
from jobwire.testing import fake_lease, run_handler, run_handler_sync


async def test_success_is_an_ack_and_the_context_is_filled() -> None:
    seen: dict[str, object] = {}

    async def handler(ctx: jobwire.JobContext) -> None:
        seen.update(json=ctx.json(), attempt=ctx.attempt, key=ctx.idempotency_key, meta=ctx.metadata)

    outcome = await run_handler(handler, "n", {"a": 1}, attempt=3, idempotency_key="k", metadata={"m": "1"})
    assert outcome.acked and outcome.disposition == "ACK"
    assert seen == {"json": {"a": 1}, "attempt": 3, "key": "k", "meta": {"m": "1"}}


async def test_typed_errors_map_to_dispositions() -> None:
    def non_retryable(ctx: jobwire.JobContext) -> None:
        raise jobwire.NonRetryable("400 invalid address", error_type="invalid_address")

    async def retry_after(ctx: jobwire.JobContext) -> None:
        raise jobwire.RetryAfter(timedelta(seconds=2))

    async def rate_limited(ctx: jobwire.JobContext) -> None:
        raise jobwire.RateLimited(1.5, "429", pause_queue=True)

    o = await run_handler(non_retryable)
    assert o.disposition == "NO_RETRY" and o.fail is not None
    assert o.fail.error.error_type == "invalid_address" and o.fail.error.message == "400 invalid address"
    assert o.retry_after is None
    o = await run_handler(retry_after)
    assert o.disposition == "RETRY" and o.retry_after == timedelta(seconds=2)
    o = await run_handler(rate_limited)
    assert o.disposition == "RATE_LIMITED" and o.retry_after == timedelta(seconds=1.5)
    assert o.fail is not None and o.fail.pause_queue and o.fail.error.message == "429"


def test_other_errors_retry_with_type_and_a_bounded_traceback() -> None:
    class VeryLongName(Exception):
        error_type = "x" * 300

    def deep(n: int) -> None:
        if n == 0:
            raise VeryLongName("é" * 5000)
        deep(n - 1)

    def handler(ctx: jobwire.JobContext) -> None:
        deep(400)

    o = run_handler_sync(handler)
    assert o.disposition == "RETRY" and o.fail is not None
    assert o.fail.error.error_type == "x" * MAX_ERROR_TYPE_BYTES
    assert len(o.fail.error.details.encode()) <= MAX_DETAILS_BYTES
    assert o.fail.error.details.startswith("…[truncated ")
    assert o.fail.error.details.rstrip().endswith("é")  # the newest frames and the message are kept
    o = run_handler_sync(lambda ctx: int("x"))
    assert o.fail is not None and o.fail.error.error_type == "ValueError"


def test_fake_lease_is_what_a_worker_gets() -> None:
    lease = fake_lease("n", [1], queue="q", job_id="j")
    assert lease.job.content_type == "application/json" and lease.job.payload == b"[1]"
    assert lease.idempotency_key == "q:j" and lease.attempt == 1


@pytest.mark.jobwire_args("--lease-duration", "7s")
async def test_the_pytest_plugin_passes_server_flags(jobwire_client: jobwire.Client) -> None:
    await jobwire_client.enqueue("plugin-q", "n", b"", job_id="p1")
    call = jobwire_client.workers.Subscribe()
    await call.write(pb.SubscribeRequest(open=pb.OpenStream(queues=["plugin-q"], credits=1)))
    resp = await call.read()
    call.cancel()
    assert isinstance(resp, pb.SubscribeResponse)
    lease = resp.lease
    left = lease.lease_deadline.ToDatetime(tzinfo=timezone.utc) - datetime.now(timezone.utc)
    assert timedelta(seconds=5) < left <= timedelta(seconds=7)
