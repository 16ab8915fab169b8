"""The leases a worker holds, from delivery until their results are settled.

A result goes out on the live stream and waits there for its ``Settled`` reply; when that
stream ends first, or no stream is up, it is settled with the unary Ack/Fail instead, retried
with full-jitter backoff while the server answers UNAVAILABLE. FAILED_PRECONDITION (or
NOT_FOUND) means the lease was lost: the job's lease expired and it may run elsewhere, so the
result is dropped, with a log line. Leases that no live stream renews (leased on a stream that
broke) are renewed by their lease token with ExtendLease.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import grpc
import grpc.aio

from jobwire import pb
from jobwire._aio import wait_event
from jobwire._backoff import Backoff
from jobwire.context import JobContext

log = logging.getLogger("jobwire.worker")

Key = tuple[str, str, str]  # (queue, job id, lease token)

LOST = {grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.NOT_FOUND}
"""Answers that mean the lease is gone (expired, and maybe leased again)."""
RETRIED = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED}
"""Answers after which a unary settle is tried again (the result is kept)."""
RESULT_TOO_LARGE = "result_too_large"
"""error_type of the Fail sent when the server refused an Ack's result as too large."""


@dataclass
class WorkerStats:
    """What a :class:`jobwire.Worker` did so far."""

    leases: int = 0
    """Leases received."""
    max_running: int = 0
    """The most handlers running at once."""
    reconnects: int = 0
    """Streams opened after the first."""
    server_drains: int = 0
    """``Draining`` messages received (the server shutting down or retiring a connection)."""
    extended: int = 0
    """Leases renewed with ExtendLease (held across a reconnect)."""
    lost: int = 0
    """Results dropped because the lease was lost (FAILED_PRECONDITION / NOT_FOUND)."""
    refused: int = 0
    """Results the server refused for another reason (logged as errors; e.g. PERMISSION_DENIED)."""
    settled: int = 0
    """Results the server accepted (acks and fails, on the stream or unary)."""
    first_lease_at: float | None = None
    """``time.monotonic()`` when the first lease arrived."""
    last_settled_at: float | None = None
    """``time.monotonic()`` when the server last accepted a result."""

    def accepted(self) -> None:
        self.settled += 1
        self.last_settled_at = time.monotonic()


@dataclass(eq=False)
class Held:
    """A lease the worker holds, from its delivery until its result is settled."""

    ctx: JobContext
    gen: int  # the stream it was leased on
    task: asyncio.Task[None] | None = None
    done: bool = False  # the handler finished (its slot is free)
    lost: bool = False  # the lease is gone; any result is dropped
    outcome: pb.FailRequest | None = None  # the result (None: ack), once done
    sent_at: float = 0.0  # loop time its result went out on a stream
    cancelled: bool = False  # the server sent a CancelLease for it (the job was cancelled)

    @property
    def key(self) -> Key:
        return (self.ctx.queue, self.ctx.job_id, self.ctx.lease_token)

    def ack(self) -> pb.AckRequest:
        """The Ack of this lease, with the handler's result bytes if it gave one."""
        q, j, t = self.key
        return pb.AckRequest(queue=q, job_id=j, lease_token=t, result=self.ctx.result or b"")

    def request(self) -> pb.SubscribeRequest:
        """The result as a stream message."""
        if self.outcome is None:
            return pb.SubscribeRequest(ack=self.ack())
        return pb.SubscribeRequest(fail=self.outcome)


class LeaseBook:
    """The held leases of one worker and the results on their way to the server."""

    def __init__(
        self,
        stub: Callable[[], pb.WorkerServiceAsyncStub],
        worker_id: str,
        timeout: float,
        stats: WorkerStats,
    ) -> None:
        self._stub = stub
        self.worker_id = worker_id
        self.timeout = timeout
        self.stats = stats
        self.held: dict[Key, Held] = {}
        self.pending: dict[Key, Held] = {}  # results sent on a stream, awaiting Settled
        self.unary: dict[Key, asyncio.Task[None]] = {}  # results being settled with unary calls
        self._changed: asyncio.Event | None = None  # set on each settle and stream end

    def stub(self) -> pb.WorkerServiceAsyncStub:
        """The WorkerService stub of the client's current channel."""
        return self._stub()

    def start(self) -> None:
        """Inside the running event loop, before use."""
        self._changed = asyncio.Event()

    def notify(self) -> None:
        if self._changed is not None:
            self._changed.set()

    async def wait_for(self, done: Callable[[], bool], timeout: float) -> None:
        """Waits until ``done()`` (looked at after each settle or stream end), or ``timeout`` s."""
        assert self._changed is not None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not done():
            left = deadline - loop.time()
            if left <= 0:
                return
            self._changed.clear()
            await wait_event(self._changed, left)

    # === results on a stream ===

    def sent(self, held: Held) -> None:
        """``held``'s result went out on a stream; its Settled reply is awaited."""
        held.sent_at = asyncio.get_running_loop().time()
        self.pending[held.key] = held

    def oldest_unanswered(self) -> float | None:
        """Loop time the oldest result still awaiting its Settled reply was sent, if any."""
        return min((h.sent_at for h in self.pending.values()), default=None)

    def on_settled(self, s: pb.Settled) -> None:
        """A Settled reply: code 0 applied, 9 lease lost (logged), others refused (logged)."""
        key = (s.queue, s.job_id, s.lease_token)
        held = self.pending.pop(key, None)
        if held is not None and self._result_refused(held, s.code, s.message):
            self.settle_unary(held)
            return
        self.held.pop(key, None)
        self.notify()
        if s.code == 0:
            self.stats.accepted()
        elif s.code == grpc.StatusCode.FAILED_PRECONDITION.value[0]:
            self.stats.lost += 1
            log.warning(
                "worker %s: lease of %s/%s lost before its result was settled: %s (result dropped)",
                self.worker_id,
                s.queue,
                s.job_id,
                s.message,
            )
        else:
            self.stats.refused += 1
            log.error(
                "worker %s: settling %s/%s refused: code %d: %s (result dropped)",
                self.worker_id,
                s.queue,
                s.job_id,
                s.code,
                s.message,
            )

    def stream_ended(self, gen: int) -> None:
        """Stream ``gen`` ended: what it did not answer is settled with unary calls."""
        for key, held in list(self.pending.items()):
            if held.gen <= gen:
                del self.pending[key]
                self.settle_unary(held)
        self.notify()

    # === unary settles ===

    def settle_unary(self, held: Held) -> None:
        """Settles ``held``'s result with the unary Ack/Fail, in the background."""
        if held.key in self.unary:
            return
        task = asyncio.create_task(self._settle_unary(held), name=f"jobwire-settle-{held.ctx.job_id}")
        self.unary[held.key] = task

        def finished(_: asyncio.Task[None]) -> None:
            self.unary.pop(held.key, None)
            self.notify()

        task.add_done_callback(finished)

    async def _settle_unary(self, held: Held) -> None:
        q, j, _ = held.key
        backoff = Backoff(base=0.5, cap=30.0)
        while True:
            try:
                if held.outcome is None:
                    await self._stub().Ack(held.ack(), timeout=self.timeout)
                else:
                    await self._stub().Fail(held.outcome, timeout=self.timeout)
                self.stats.accepted()
                self.held.pop(held.key, None)
                return
            except grpc.aio.AioRpcError as e:
                if self._result_refused(held, e.code().value[0], e.details() or ""):
                    continue
                if e.code() not in RETRIED:
                    self._dropped(held, e)
                    return
                log.info("worker %s: settling %s/%s: %s; retrying", self.worker_id, q, j, e.code().name)
            await asyncio.sleep(backoff.next_delay())

    def _result_refused(self, held: Held, code: int, message: str) -> bool:
        """An Ack refused for its result (RESOURCE_EXHAUSTED: over the server's result limit;
        the job is still leased): turns it into a NO_RETRY Fail (error type
        ``result_too_large``) to send instead, so the job is dead-lettered with the reason rather
        than left leased. Returns whether it did."""
        if code != grpc.StatusCode.RESOURCE_EXHAUSTED.value[0] or held.outcome is not None:
            return False
        if not held.ctx.result:
            return False
        log.error(
            "worker %s: the result of %s/%s (%d bytes) was refused: %s; failing the job",
            self.worker_id,
            held.ctx.queue,
            held.ctx.job_id,
            len(held.ctx.result),
            message,
        )
        q, j, t = held.key
        held.outcome = pb.FailRequest(
            queue=q,
            job_id=j,
            lease_token=t,
            disposition=pb.FAIL_DISPOSITION_NO_RETRY,
            error=pb.JobError(error_type=RESULT_TOO_LARGE, message=f"result refused: {message}"),
        )
        return True

    def _dropped(self, held: Held, e: grpc.aio.AioRpcError) -> None:
        q, j, _ = held.key
        self.held.pop(held.key, None)
        if e.code() in LOST:
            self.stats.lost += 1
            log.warning(
                "worker %s: lease of %s/%s lost (%s: %s): result dropped",
                self.worker_id,
                q,
                j,
                e.code().name,
                e.details(),
            )
        else:
            self.stats.refused += 1
            log.error(
                "worker %s: settling %s/%s failed (%s: %s): result dropped",
                self.worker_id,
                q,
                j,
                e.code().name,
                e.details(),
            )

    # === renewals ===

    async def extend_carried(self, live_gen: int | None, timeout: float) -> None:
        """Renews every held lease not leased on the live stream ``live_gen``."""
        carried = [h for h in self.held.values() if h.gen != live_gen and not h.lost]
        if carried:
            await asyncio.gather(*(self._extend(h, timeout) for h in carried))

    async def _extend(self, held: Held, timeout: float) -> None:
        q, j, t = held.key
        try:
            await self._stub().ExtendLease(
                pb.ExtendLeaseRequest(queue=q, job_id=j, lease_token=t), timeout=timeout
            )
            self.stats.extended += 1
        except grpc.aio.AioRpcError as e:
            settling = held.key in self.unary or held.key in self.pending
            if e.code() in LOST and held.key in self.held and held.done and settling:
                # Its result is on its way (the server may have applied it just before this
                # ExtendLease): the settle's own answer says whether the lease was lost.
                log.debug("worker %s: ExtendLease %s/%s: %s while settling", self.worker_id, q, j, e.code())
            elif e.code() in LOST and held.key in self.held:
                log.warning(
                    "worker %s: lease of %s/%s lost (%s: %s): cancelling its handler",
                    self.worker_id,
                    q,
                    j,
                    e.code().name,
                    e.details(),
                )
                held.lost = True
                held.ctx.cancel()
                if held.done:  # its result was on its way: dropped
                    self.stats.lost += 1
                    self.held.pop(held.key, None)
            else:
                log.debug("worker %s: ExtendLease %s/%s: %s", self.worker_id, q, j, e.code().name)
