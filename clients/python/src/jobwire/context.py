"""What a handler gets: the leased job, its attempt, idempotency key, a cancellation signal, and
the ways to report progress, save a checkpoint and return a result."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from jobwire import pb

Reporter = Callable[[pb.ReportProgressRequest], Awaitable[None]]
"""Sends one progress report and waits for the server's answer (the worker's, per lease)."""

MAX_PROGRESS = 100


def to_bytes(value: Any) -> bytes:
    """``bytes`` as they are, ``str`` as UTF-8, anything else JSON-encoded (as payloads are)."""
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    if isinstance(value, str):
        return value.encode()
    return json.dumps(value, separators=(",", ":")).encode()


@dataclass
class JobContext:
    """One leased attempt of a job, as its handler sees it.

    ``cancelled`` (an ``asyncio.Event``, for async handlers) and ``cancelled_sync`` (a
    ``threading.Event``, for handlers running in the worker's thread pool) are set together when
    the handler should stop: the job was cancelled (``CancelJob``: :attr:`cancel_reason` is then
    set), the worker's shutdown grace ran out, or the lease was lost (another worker may run the
    job now). The SDK cancels an async handler's task too; a sync handler must look at
    ``cancelled_sync`` itself. After a job's cancel, a handler that stops (raises: the task's
    ``asyncio.CancelledError`` is failed with error type ``cancelled``, another error with its
    own record) is settled as a Fail and the job ends CANCELLED; one that returns anyway (it
    caught the ``CancelledError``, or a sync handler that finished) is acked with its result
    and the job ends COMPLETED. After a shutdown or a lost lease what it returns is dropped.

    Progress, checkpoints and results: ``await ctx.progress(40, "step 2 of 5")``, ``await
    ctx.save_checkpoint(b"...")`` (the next attempt finds it in :attr:`checkpoint`), or both at
    once with :meth:`report`; sync handlers use the ``*_sync`` twins. A handler returning
    ``bytes`` or ``str`` (or calling :meth:`set_result`) has that result attached to its Ack, for
    ``get_job`` to read.
    """

    lease: pb.Lease
    worker_id: str = ""
    cancelled: asyncio.Event = field(default_factory=asyncio.Event)
    cancelled_sync: threading.Event = field(default_factory=threading.Event)
    _reporter: Reporter | None = field(default=None, repr=False)
    _loop: asyncio.AbstractEventLoop | None = field(default=None, init=False, repr=False)
    _result: bytes | None = field(default=None, init=False, repr=False)
    _checkpoint: bytes = field(default=b"", init=False, repr=False)
    _cancel_reason: str | None = field(default=None, init=False, repr=False)
    _revoke_time: datetime | None = field(default=None, init=False, repr=False)
    reports: list[pb.ReportProgressRequest] = field(default_factory=list, init=False, repr=False)
    """The progress reports the server saved for this attempt, in order."""

    def __post_init__(self) -> None:
        self._checkpoint = self.lease.job.checkpoint

    @property
    def job(self) -> pb.Job:
        """The job (its last failed attempt only in ``errors``; ``get_job`` has the history)."""
        return self.lease.job

    @property
    def queue(self) -> str:
        return self.lease.job.queue

    @property
    def job_id(self) -> str:
        return self.lease.job.job_id

    @property
    def name(self) -> str:
        """The job type the handler was registered for."""
        return self.lease.job.name

    @property
    def payload(self) -> bytes:
        return self.lease.job.payload

    @property
    def content_type(self) -> str:
        return self.lease.job.content_type

    @property
    def metadata(self) -> dict[str, str]:
        return dict(self.lease.job.metadata)

    @property
    def group_key(self) -> str:
        """The job's group (its tenant; "" for the queue's default group)."""
        return self.lease.job.group_key

    @property
    def attempt(self) -> int:
        """This attempt's number, 1-based (a RATE_LIMITED comeback keeps the number)."""
        return self.lease.attempt

    @property
    def idempotency_key(self) -> str:
        """Stable across attempts and replays of this job: pass it to downstream providers."""
        return self.lease.idempotency_key

    @property
    def lease_token(self) -> str:
        return self.lease.lease_token

    @property
    def lease_deadline(self) -> datetime:
        """When the lease expires unless renewed (the worker renews it while the handler runs)."""
        return self.lease.lease_deadline.ToDatetime(tzinfo=timezone.utc)

    @property
    def checkpoint(self) -> bytes:
        """The last checkpoint saved for this job: by an earlier attempt (from the lease) until
        this attempt saves one; ``b""`` when there is none. Resume from it."""
        return self._checkpoint

    @property
    def cancel_reason(self) -> str | None:
        """The reason given with ``cancel_job`` once the job was cancelled while this attempt
        ran (``""`` when none was given); ``None`` when it was not cancelled."""
        return self._cancel_reason

    @property
    def revoke_time(self) -> datetime | None:
        """After a cancel: when the server revokes the lease unless the job is settled by then."""
        return self._revoke_time

    @property
    def result(self) -> bytes | None:
        """The result the Ack will carry (:meth:`set_result` or the handler's return value)."""
        return self._result

    def json(self) -> Any:
        """The payload decoded as JSON."""
        return json.loads(self.lease.job.payload)

    # === progress, checkpoints, results ===

    async def report(
        self,
        progress: int | None = None,
        message: str | None = None,
        checkpoint: Any = None,
    ) -> None:
        """Saves progress (0-100), its message (up to 256 bytes) and/or a checkpoint (``bytes``,
        ``str`` as UTF-8, else JSON; up to the server's limit, 64 KiB by default; ``b""``
        clears it) on the job, fenced by this attempt's lease; ``None`` keeps the last value.
        Waits for the server's answer: raises :class:`jobwire.LeaseLost` when the lease is gone
        (stop working: the result will be dropped), :class:`jobwire.ReportRefused` for a value
        the server refuses (nothing of this report is saved)."""
        if progress is not None and not 0 <= progress <= MAX_PROGRESS:
            raise ValueError(f"progress must be 0 to 100, got {progress}")
        req = pb.ReportProgressRequest(queue=self.queue, job_id=self.job_id, lease_token=self.lease_token)
        if progress is not None:
            req.progress = progress
        if message is not None:
            req.message = message
        if checkpoint is not None:
            req.checkpoint = to_bytes(checkpoint)
        if self._reporter is not None:
            await self._reporter(req)
        self.reports.append(req)
        if req.HasField("checkpoint"):
            self._checkpoint = req.checkpoint

    async def progress(self, percent: int, message: str | None = None) -> None:
        """Saves the job's progress, 0-100, with an optional message (see :meth:`report`)."""
        await self.report(percent, message)

    async def save_checkpoint(
        self, data: Any, *, progress: int | None = None, message: str | None = None
    ) -> None:
        """Saves a checkpoint the next attempt finds in :attr:`checkpoint` (see :meth:`report`)."""
        await self.report(progress, message, data if data is not None else b"")

    def report_sync(
        self, progress: int | None = None, message: str | None = None, checkpoint: Any = None
    ) -> None:
        """:meth:`report` for a sync handler (one running in the worker's thread pool)."""
        self._blocking(lambda: self.report(progress, message, checkpoint))

    def progress_sync(self, percent: int, message: str | None = None) -> None:
        """:meth:`progress` for a sync handler."""
        self._blocking(lambda: self.report(percent, message))

    def save_checkpoint_sync(
        self, data: Any, *, progress: int | None = None, message: str | None = None
    ) -> None:
        """:meth:`save_checkpoint` for a sync handler."""
        self._blocking(lambda: self.save_checkpoint(data, progress=progress, message=message))

    def _blocking(self, make: Callable[[], Awaitable[None]]) -> None:
        loop = self._loop
        if loop is None or not loop.is_running():
            raise RuntimeError("report_sync() needs the worker's event loop (call it from a sync handler)")
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            raise RuntimeError("use `await ctx.report(...)` in an async handler; *_sync would block the loop")

        async def run() -> None:
            await make()

        asyncio.run_coroutine_threadsafe(run(), loop).result()

    def set_result(self, value: Any) -> None:
        """The result to attach to the Ack (``bytes``, ``str`` as UTF-8, anything else JSON; up
        to the server's result limit, 64 KiB by default); ``get_job`` returns it in
        ``job.result``. A handler returning ``bytes`` or ``str`` does the same."""
        self._result = to_bytes(value)

    # === called by the worker ===

    def returned(self, value: Any) -> None:
        """The handler returned ``value``: ``bytes`` or ``str`` become the result unless
        :meth:`set_result` set one (other values are ignored)."""
        if self._result is None and isinstance(value, bytes | bytearray | memoryview | str):
            self._result = to_bytes(value)

    def cancel(self) -> None:
        """Sets both cancellation events (the worker calls this)."""
        self.cancelled_sync.set()
        self.cancelled.set()

    def cancel_job(self, reason: str, revoke_time: datetime | None) -> None:
        """The job was cancelled (a CancelLease): records why and sets both events."""
        self._cancel_reason = reason
        self._revoke_time = revoke_time
        self.cancel()
