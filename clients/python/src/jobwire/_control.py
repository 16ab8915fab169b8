"""Job control on the worker's side: the server's CancelLease (the job was cancelled: signal its
handler) and the handlers' progress reports (sent on the live stream, each awaiting its
ProgressSaved; with the unary ReportProgress when no stream is up, or when the stream ends
before it answered: saving the same values twice is harmless).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timezone

import grpc.aio

from jobwire import pb
from jobwire._backoff import retry_unavailable
from jobwire._book import Held, Key, LeaseBook
from jobwire._stream import Stream
from jobwire.context import JobContext, Reporter
from jobwire.errors import LeaseLost, report_error, status_code

log = logging.getLogger("jobwire.worker")


@dataclass(eq=False)
class _Pending:
    """A progress report sent on stream ``gen``, awaiting its ProgressSaved."""

    req: pb.ReportProgressRequest
    answer: asyncio.Future[None]
    gen: int


class Control:
    """Cancels and progress reports of one worker's held leases."""

    def __init__(
        self,
        book: LeaseBook,
        stream: Callable[[], Stream | None],
        is_async: Callable[[JobContext], bool],
        tries: int,
    ) -> None:
        self._book = book
        self._stream = stream
        self._is_async = is_async
        self._tries = tries
        self._waiting: dict[Key, deque[_Pending]] = {}
        self._unary: set[asyncio.Task[None]] = set()

    # === cancels ===

    def on_cancel(self, c: pb.CancelLease) -> None:
        """The server cancelled the job held under ``c.lease_token``: sets the handler's
        cancellation events and cancels an async handler's task. What the handler then raises
        is settled as a Fail (the server ends the job CANCELLED); what it returns is acked (the
        job ends COMPLETED: it finished anyway)."""
        held = self._book.held.get((c.queue, c.job_id, c.lease_token))
        if held is None or held.done or held.cancelled:
            log.debug(
                "worker %s: CancelLease for %s/%s: not running here", self._book.worker_id, c.queue, c.job_id
            )
            return
        held.cancelled = True
        revoke = c.revoke_time.ToDatetime(tzinfo=timezone.utc) if c.HasField("revoke_time") else None
        log.info(
            "worker %s: job %s/%s cancelled (%s): stopping its handler",
            self._book.worker_id,
            c.queue,
            c.job_id,
            c.reason or "no reason given",
        )
        held.ctx.cancel_job(c.reason, revoke)
        if held.task is not None and self._is_async(held.ctx):
            held.task.cancel()

    # === progress reports ===

    def reporter(self, held: Held) -> Reporter:
        """The function ``held``'s context sends its reports with."""
        return functools.partial(self._report, held)

    async def _report(self, held: Held, req: pb.ReportProgressRequest) -> None:
        if held.lost:
            raise LeaseLost("lease lost")
        try:
            stream = self._stream()
            if stream is None or stream.closing:
                await self._send_unary(req)
                return
            answer: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            key = (req.queue, req.job_id, req.lease_token)
            self._waiting.setdefault(key, deque()).append(_Pending(req, answer, stream.gen))
            stream.send(pb.SubscribeRequest(progress=req))
            await answer
        except LeaseLost:
            if not held.lost:
                log.warning(
                    "worker %s: lease of %s/%s lost (a progress report was refused): signalling its handler",
                    self._book.worker_id,
                    req.queue,
                    req.job_id,
                )
                held.lost = True
                held.ctx.cancel()
            raise

    def on_saved(self, saved: pb.ProgressSaved) -> None:
        """The server's answer to the oldest report of that lease sent on the stream."""
        key = (saved.queue, saved.job_id, saved.lease_token)
        waiting = self._waiting.get(key)
        if not waiting:
            return
        pending = waiting.popleft()
        if not waiting:
            del self._waiting[key]
        if pending.answer.done():  # its handler stopped waiting (cancelled)
            return
        if saved.code == 0:
            pending.answer.set_result(None)
        else:
            pending.answer.set_exception(report_error(status_code(saved.code), saved.message))

    def stream_ended(self, gen: int) -> None:
        """Stream ``gen`` ended: the reports it did not answer go out with ReportProgress."""
        for key in list(self._waiting):
            waiting = self._waiting[key]
            kept = deque(p for p in waiting if p.gen > gen)
            for p in waiting:
                if p.gen <= gen and not p.answer.done():
                    task = asyncio.create_task(self._resend(p), name=f"jobwire-report-{key[1]}")
                    self._unary.add(task)
                    task.add_done_callback(self._unary.discard)
            if kept:
                self._waiting[key] = kept
            else:
                del self._waiting[key]

    async def _resend(self, p: _Pending) -> None:
        try:
            await self._send_unary(p.req)
        except Exception as e:
            if not p.answer.done():
                p.answer.set_exception(e)
            return
        if not p.answer.done():
            p.answer.set_result(None)

    async def _send_unary(self, req: pb.ReportProgressRequest) -> None:
        stub = self._book.stub()
        try:
            await retry_unavailable(lambda: stub.ReportProgress(req, timeout=self._book.timeout), self._tries)
        except grpc.aio.AioRpcError as e:
            raise report_error(e.code(), e.details() or "") from None

    def close(self) -> None:
        """The worker stopped: reports still waiting for an answer raise LeaseLost (the worker
        holds no lease any more)."""
        for waiting in self._waiting.values():
            for p in waiting:
                if not p.answer.done():
                    p.answer.set_exception(LeaseLost("the worker stopped before the report was answered"))
        self._waiting.clear()
        for task in self._unary:
            task.cancel()
