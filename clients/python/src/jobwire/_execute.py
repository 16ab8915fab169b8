"""Running one handler on one lease and turning its outcome into an Ack or a Fail."""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor
from typing import Any

from jobwire import pb
from jobwire.context import JobContext
from jobwire.errors import fail_request

log = logging.getLogger("jobwire.worker")

AsyncHandler = Callable[[JobContext], Awaitable[Any]]
SyncHandler = Callable[[JobContext], Any]
Handler = AsyncHandler | SyncHandler

NO_HANDLER_ERROR_TYPE = "no_handler"


class NoHandler(Exception):
    """The worker has no handler for the job's name (failed with RETRY: a worker that knows the
    name may take the next attempt)."""

    error_type = NO_HANDLER_ERROR_TYPE


async def execute(
    handler: Handler | None, ctx: JobContext, executor: Executor | None
) -> pb.FailRequest | None:
    """Runs ``handler(ctx)``: an ``async def`` on the event loop, a plain function in
    ``executor`` (a thread pool). Returns ``None`` for success (ack; a ``bytes`` or ``str`` it
    returned becomes ``ctx.result``), else the FailRequest for what it raised (queue, job id and
    lease token filled in). Cancellation propagates."""
    ctx._loop = asyncio.get_running_loop()
    try:
        if handler is None:
            raise NoHandler(f"no handler registered for job name {ctx.name!r}")
        if inspect.iscoroutinefunction(handler):
            result = await handler(ctx)
        else:
            result = await ctx._loop.run_in_executor(executor, handler, ctx)
            if inspect.isawaitable(result):
                result = await result
        ctx.returned(result)
    except asyncio.CancelledError:
        raise
    except Exception as e:
        req = fail_request(e)
        req.queue, req.job_id, req.lease_token = ctx.queue, ctx.job_id, ctx.lease_token
        level = logging.INFO if req.disposition != pb.FAIL_DISPOSITION_RETRY else logging.WARNING
        log.log(
            level,
            "job %s/%s attempt %d failed: %s: %s",
            ctx.queue,
            ctx.job_id,
            ctx.attempt,
            req.error.error_type,
            req.error.message,
        )
        return req
    return None
