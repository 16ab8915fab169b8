"""The asyncio worker: leases jobs over one Subscribe stream and runs a handler per job name.

Behaviour (issue 14; DESIGN.md section 3):

* **Concurrency = credits** (Pub/Sub flow control): the stream opens with as many credits as
  free handler slots, the server returns a credit when a lease of that stream is settled, and
  the worker grants one itself only when a slot frees that an older stream's lease held. The
  worker never holds more leases than ``concurrency``.
* **Liveness from the stream**: a Heartbeat every ``heartbeat_interval`` seconds of silence
  (the server renews the stream's leases while it hears from it), a stall watchdog on every
  write, gRPC keepalive on the channel.
* **Reconnect**: a broken stream is replaced with full-jitter backoff (0.5 s doubling to 30 s),
  under the same worker id. Leases still held are renewed with ExtendLease by their lease token
  (at once, then every ``heartbeat_interval``; when every slot is busy the new stream opens
  only once one frees, as OpenStream needs at least one credit, and ExtendLease alone keeps
  the leases meanwhile), results are settled with the unary Ack/Fail
  while no stream is up (FAILED_PRECONDITION: the lease was lost, the result is logged and
  dropped; UNAVAILABLE: kept and retried). A result is never dropped without a log line.
* **Graceful shutdown** on SIGTERM/SIGINT (``handle_signals=False`` to opt out): Drain (no more
  leases), wait up to ``grace`` seconds for held jobs, then cancel what still runs and hand it
  back uncharged (a Fail with ``FAIL_DISPOSITION_RELEASE``: the job is WAITING again with its
  attempt not counted, as the server's own drain does, so a deploy never dead-letters work;
  error_type ``worker_shutdown`` for the server's log: the conventions of
  clients/conformance/README.md), then close. A second signal skips
  the grace. A server ``Draining`` message stops leases; held jobs finish and the worker
  reconnects once the server ends the stream.
* **Job control** (issue 16; :mod:`jobwire._control`): a CancelLease sets the handler's
  cancellation events and cancels an async handler's task. A handler that stops (raises,
  the task's ``asyncio.CancelledError`` included) is settled as a Fail (the server ends the
  job CANCELLED; error type ``cancelled`` for the CancelledError); one that returns anyway is
  acked with its result (the job ends COMPLETED), as in the Go and Rust SDKs. Progress
  reports go out on the stream, each awaiting its ProgressSaved (the unary ReportProgress
  when no stream answers).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import os
import signal
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from typing import TypeVar

import grpc
import grpc.aio

from jobwire import pb
from jobwire._aio import wait_event
from jobwire._backoff import Backoff
from jobwire._book import Held, LeaseBook, WorkerStats
from jobwire._control import Control
from jobwire._execute import Handler, execute
from jobwire._stream import Stream, StreamStalled
from jobwire.client import Client
from jobwire.context import JobContext
from jobwire.errors import JobwireError, cancelled_fail

log = logging.getLogger("jobwire.worker")

H = TypeVar("H", bound=Handler)

DEFAULT_GRACE = 25.0
"""Seconds a shutdown waits for held jobs (below Kubernetes' default 30 s termination grace)."""
DEFAULT_HEARTBEAT_INTERVAL = 2.0
"""Seconds of silence before a Heartbeat; well below the server's --heartbeat-timeout (10 s)."""
SHUTDOWN_ERROR_TYPE = "worker_shutdown"
"""error_type sent with the jobs a shutdown hands back (RELEASE) because they outlived the grace."""
PERMANENT = {
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.PERMISSION_DENIED,
    grpc.StatusCode.UNAUTHENTICATED,
    grpc.StatusCode.UNIMPLEMENTED,
}
"""Subscribe refusals that reconnecting cannot fix: Worker.run() raises them."""


class SubscribeRefused(JobwireError):
    """The server refused the Subscribe stream for good (bad queue, no permission, no token)."""

    def __init__(self, error: grpc.aio.AioRpcError) -> None:
        super().__init__(f"Subscribe refused: {error.code().name}: {error.details()}")
        self.code = error.code()
        self.details = error.details() or ""


def default_worker_id() -> str:
    """``<host>-<pid>-<random>``: unique per Worker, kept across its reconnects."""
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


class Worker:
    """Runs handlers for the jobs of ``queues`` with at most ``concurrency`` at once.

    ``client``: a :class:`jobwire.Client` (its channel, token and TLS). ``worker_id``: names the
    worker in the server's logs and in each failed attempt's record (default
    ``<host>-<pid>-<random>``). ``grace``: seconds a shutdown waits for held jobs (> 0).
    ``heartbeat_interval``: seconds of stream silence before a Heartbeat; keep it well below the
    server's ``--heartbeat-timeout``. ``stall_timeout``: seconds a stream write may take before
    the stream counts as stalled and is replaced. Sync handlers run in a thread pool of
    ``concurrency`` threads.

    Register handlers with :meth:`handler`, then ``await worker.run()``; :meth:`stop` (or a
    signal) ends it gracefully.
    """

    def __init__(
        self,
        client: Client,
        queues: Iterable[str],
        concurrency: int = 1,
        worker_id: str | None = None,
        *,
        grace: float = DEFAULT_GRACE,
        handle_signals: bool = True,
        heartbeat_interval: float = DEFAULT_HEARTBEAT_INTERVAL,
        stall_timeout: float | None = None,
    ) -> None:
        self.queues = list(queues)
        if not 1 <= len(self.queues) <= 32:
            raise ValueError("a worker serves 1 to 32 queues")
        if not 1 <= concurrency <= 10_000:
            raise ValueError("concurrency must be 1 to 10000")
        if grace <= 0:
            raise ValueError("grace must be above 0 s (a grace of 0 kills in-flight work)")
        self.client = client
        self.concurrency = concurrency
        self.worker_id = worker_id or default_worker_id()
        self.grace = grace
        self.handle_signals = handle_signals
        self.heartbeat_interval = heartbeat_interval
        self.stall_timeout = stall_timeout if stall_timeout is not None else max(10.0, 3 * heartbeat_interval)
        self._handlers: dict[str, Handler] = {}
        self._running = 0
        self._gen = 0
        self._stream: Stream | None = None
        self._stopping = False
        self._stop_now = False
        self._closed = False  # run() has ended: background loops stop
        self._stop_event: asyncio.Event | None = None
        self._slot_freed: asyncio.Event | None = None
        self._extend_now: asyncio.Event | None = None
        self._pace_s = heartbeat_interval  # heartbeat and renewal period, see _pace
        self._executor: ThreadPoolExecutor | None = None
        self.stats = WorkerStats()
        """Counters of what this worker did (for tests, logs and metrics)."""
        self._book = LeaseBook(lambda: client.workers, self.worker_id, client.timeout, self.stats)
        self._control = Control(
            self._book,
            lambda: self._stream,
            lambda ctx: inspect.iscoroutinefunction(self._handlers.get(ctx.name)),
            client.unavailable_tries,
        )

    # === handlers ===

    def handler(self, name: str) -> Callable[[H], H]:
        """Registers the decorated function for jobs named ``name``: ``async def f(ctx)`` runs on
        the event loop, ``def f(ctx)`` in the worker's thread pool. Returning is success (ack);
        raising fails the attempt (see :mod:`jobwire.errors`)."""

        def register(fn: H) -> H:
            self.handle(name, fn)
            return fn

        return register

    def handle(self, name: str, fn: Handler) -> None:
        """Registers ``fn`` for jobs named ``name`` (the non-decorator form)."""
        if name in self._handlers:
            raise ValueError(f"a handler for {name!r} is already registered")
        self._handlers[name] = fn

    # === lifecycle ===

    @property
    def running(self) -> int:
        """Handlers running now."""
        return self._running

    def stop(self, *, now: bool = False) -> None:
        """Starts a graceful shutdown (``now``: without waiting for the grace). Safe to call
        from the event loop's thread; from another thread use ``loop.call_soon_threadsafe``."""
        self._stopping = True
        self._stop_now = self._stop_now or now
        if self._stop_event is not None:
            self._stop_event.set()
        if self._slot_freed is not None:
            self._slot_freed.set()

    async def run(self) -> None:
        """Leases and runs jobs until :meth:`stop` or SIGTERM/SIGINT, then shuts down gracefully.

        Raises :class:`SubscribeRefused` when the server refuses the stream for good
        (PERMISSION_DENIED, UNAUTHENTICATED, INVALID_ARGUMENT), after settling what it held.
        """
        loop = asyncio.get_running_loop()
        self._stop_event = asyncio.Event()
        self._slot_freed = asyncio.Event()
        self._extend_now = asyncio.Event()
        self._book.start()
        if self._stopping:
            self._stop_event.set()
        self._executor = ThreadPoolExecutor(self.concurrency, thread_name_prefix=f"jobwire-{self.worker_id}")
        signals = self._install_signals(loop)
        connect = asyncio.create_task(self._connect_loop(), name="jobwire-connect")
        extend = asyncio.create_task(self._extend_loop(), name="jobwire-extend")
        stop_wait = asyncio.create_task(self._stop_event.wait())
        try:
            await asyncio.wait({connect, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
            refused = connect.exception() if connect.done() and not connect.cancelled() else None
            self.stop(now=refused is not None)
            await self._shutdown()
            if refused is not None:
                raise refused
        finally:
            self._closed = True
            for t in (connect, extend, stop_wait):
                t.cancel()
            for t in (connect, extend, stop_wait):
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await t
            for sig in signals:
                loop.remove_signal_handler(sig)
            self._control.close()
            self._executor.shutdown(wait=False, cancel_futures=True)

    def _install_signals(self, loop: asyncio.AbstractEventLoop) -> list[signal.Signals]:
        if not self.handle_signals or threading.current_thread() is not threading.main_thread():
            return []
        installed = []
        for sig in (signal.SIGTERM, signal.SIGINT):
            try:
                loop.add_signal_handler(sig, self._on_signal, sig)
                installed.append(sig)
            except (NotImplementedError, RuntimeError):  # pragma: no cover - not on this platform
                pass
        return installed

    def _on_signal(self, sig: signal.Signals) -> None:
        if self._stopping:
            log.warning(
                "worker %s: %s again: stopping without waiting for the grace", self.worker_id, sig.name
            )
            self.stop(now=True)
            return
        log.info("worker %s: %s: draining (grace %.1f s)", self.worker_id, sig.name, self.grace)
        self.stop()

    # === the stream ===

    def _free_slots(self) -> int:
        return self.concurrency - self._running

    async def _connect_loop(self) -> None:
        assert self._slot_freed is not None
        backoff = Backoff(base=0.5, cap=30.0)
        while not self._stopping:
            while self._free_slots() <= 0 and not self._stopping:
                self._slot_freed.clear()
                await self._slot_freed.wait()
            if self._stopping:
                return
            self._gen += 1
            if self._gen > 1:
                self.stats.reconnects += 1
            open_msg = pb.OpenStream(queues=self.queues, credits=self._free_slots(), worker_id=self.worker_id)
            stream = Stream(
                self.client.workers,
                self._gen,
                self._pace_s,
                self.stall_timeout,
                open_msg,
                self._book.oldest_unanswered,
            )
            self._stream = stream
            try:
                task = asyncio.ensure_future(stream.run(self._on_message))
                while not task.done():
                    try:
                        await asyncio.wait({task}, timeout=0.2)
                    except asyncio.CancelledError:
                        task.cancel()
                        stream.cancel()
                        raise
                    if stream.opened and backoff.attempt:
                        backoff.reset()
                    if stream.opened and not stream.extended and self._extend_now is not None:
                        stream.extended = True  # renew the carried leases at once
                        self._extend_now.set()
                task.result()
                if not self._stopping:
                    log.info("worker %s: the server ended the stream; reconnecting", self.worker_id)
            except grpc.aio.AioRpcError as e:
                if e.code() in PERMANENT:
                    self._stream_ended(stream)
                    raise SubscribeRefused(e) from None
                log.warning(
                    "worker %s: stream broke (%s: %s); reconnecting",
                    self.worker_id,
                    e.code().name,
                    e.details(),
                )
            except StreamStalled as e:
                log.warning("worker %s: stream stalled (%s); reconnecting", self.worker_id, e)
            finally:
                self._stream_ended(stream)
            if self._stopping:
                return
            delay = backoff.next_delay()
            assert self._stop_event is not None
            await wait_event(self._stop_event, delay)

    def _stream_ended(self, stream: Stream) -> None:
        if self._stream is stream:
            self._stream = None
        if self._extend_now is not None:
            self._extend_now.set()
        self._book.stream_ended(stream.gen)
        self._control.stream_ended(stream.gen)

    def _on_message(self, stream: Stream, resp: pb.SubscribeResponse) -> None:
        kind = resp.WhichOneof("message")
        if kind == "lease":
            self._on_lease(stream, resp.lease)
        elif kind == "settled":
            self._book.on_settled(resp.settled)
        elif kind == "cancel":
            self._control.on_cancel(resp.cancel)
        elif kind == "progress_saved":
            self._control.on_saved(resp.progress_saved)
        elif kind == "draining":
            stream.server_draining = True
            self.stats.server_drains += 1
            log.info(
                "worker %s: the server is draining (grace %.1f s): finishing held jobs",
                self.worker_id,
                resp.draining.grace.ToTimedelta().total_seconds(),
            )

    def _on_lease(self, stream: Stream, lease: pb.Lease) -> None:
        ctx = JobContext(lease=lease, worker_id=self.worker_id)
        held = Held(ctx=ctx, gen=stream.gen)
        ctx._reporter = self._control.reporter(held)
        if held.key in self._book.held:
            log.warning("worker %s: lease of %s/%s delivered twice", self.worker_id, ctx.queue, ctx.job_id)
            return
        self._running += 1
        self.stats.leases += 1
        if self.stats.first_lease_at is None:
            self.stats.first_lease_at = time.monotonic()
        self.stats.max_running = max(self.stats.max_running, self._running)
        self._pace(stream, lease)
        if self._running > self.concurrency:
            log.error(
                "worker %s: holds %d leases, above concurrency %d",
                self.worker_id,
                self._running,
                self.concurrency,
            )
        self._book.held[held.key] = held
        held.task = asyncio.create_task(self._run_handler(held), name=f"jobwire-job-{ctx.job_id}")

    def _pace(self, stream: Stream, lease: pb.Lease) -> None:
        """Heartbeats (and renewals of carried leases) come at most a third of a lease apart,
        so a server with a short ``--lease-duration`` or ``--heartbeat-timeout`` keeps them."""
        left = lease.lease_deadline.ToDatetime(tzinfo=timezone.utc) - datetime.now(timezone.utc)
        pace = max(0.1, min(self.heartbeat_interval, left.total_seconds() / 3))
        if pace < self._pace_s:
            self._pace_s = pace
        if stream.heartbeat_interval > self._pace_s:
            stream.heartbeat_interval = self._pace_s
            # The writer may be in a wait of the old, longer period: a heartbeat now restarts it.
            stream.send(pb.SubscribeRequest(heartbeat=pb.Heartbeat()))

    # === handlers and their results ===

    async def _run_handler(self, held: Held) -> None:
        ctx = held.ctx
        stopped = False  # the cancel's asyncio.CancelledError came out of the handler
        try:
            outcome = await execute(self._handlers.get(ctx.name), ctx, self._executor)
        except asyncio.CancelledError:
            if held.done or not held.cancelled:
                return  # the shutdown failed it already, or the lease was lost
            stopped, outcome = True, None  # the job was cancelled: settled as such below
        finally:
            if not held.done:
                held.done = True
                self._slot_free(held)
        if held.lost:
            self.stats.lost += 1
            log.warning(
                "worker %s: %s/%s finished after its lease was lost: result dropped",
                self.worker_id,
                ctx.queue,
                ctx.job_id,
            )
            self._book.held.pop(held.key, None)
            return
        if stopped:
            # It stopped because of the cancel: a Fail ends the job CANCELLED. A handler that
            # returned after the cancel (it caught the CancelledError, or a sync handler that
            # finished anyway) is acked instead: the job ends COMPLETED. An error it raised is a
            # Fail with its own record, which ends the job CANCELLED too.
            outcome = cancelled_fail(ctx.cancel_reason or "")
            outcome.queue, outcome.job_id, outcome.lease_token = held.key
        self._settle(held, outcome)

    def _slot_free(self, held: Held) -> None:
        self._running -= 1
        assert self._slot_freed is not None
        self._slot_freed.set()
        stream = self._stream
        # A lease of this stream returns its credit when settled; one of an older stream does
        # not, so the slot it frees is granted here.
        if (
            stream is not None
            and held.gen != stream.gen
            and not self._stopping
            and not stream.server_draining
            and not held.lost
        ):
            stream.send(pb.SubscribeRequest(grant_credits=pb.GrantCredits(credits=1)))

    def _settle(self, held: Held, outcome: pb.FailRequest | None) -> None:
        """Sends the result on the live stream, or with a unary call when none is up."""
        held.outcome = outcome
        stream = self._stream
        if stream is not None and not stream.closing:
            self._book.sent(held)
            stream.send(held.request())
        else:
            self._book.settle_unary(held)

    async def _extend_loop(self) -> None:
        """Renews, by lease token, every lease no live stream renews (leased on an older one):
        when a stream opens or ends, then every heartbeat period."""
        assert self._extend_now is not None
        while not self._closed:
            await wait_event(self._extend_now, self._pace_s)
            self._extend_now.clear()
            stream = self._stream
            live = stream.gen if stream is not None and stream.opened else None
            await self._book.extend_carried(live, timeout=max(2.0, self._pace_s * 2))

    # === shutdown ===

    async def _shutdown(self) -> None:
        """Drain, wait for held jobs within the grace, cancel and hand back the rest, settle, close."""
        loop = asyncio.get_running_loop()
        stream = self._stream
        if stream is not None and not stream.closing:
            stream.send(pb.SubscribeRequest(drain=pb.DrainStream()))
        deadline = loop.time() + (0.0 if self._stop_now else self.grace)
        assert self._slot_freed is not None
        while self._running > 0 and not self._stop_now:
            left = deadline - loop.time()
            if left <= 0:
                break
            self._slot_freed.clear()
            await wait_event(self._slot_freed, left)
        leftover = [h for h in self._book.held.values() if not h.done]
        if leftover:
            log.warning(
                "worker %s: %d job(s) still running at the end of the grace: cancelling them and "
                "handing them back uncharged",
                self.worker_id,
                len(leftover),
            )
        for held in leftover:
            held.ctx.cancel()
            fail = pb.FailRequest(
                queue=held.ctx.queue,
                job_id=held.ctx.job_id,
                lease_token=held.ctx.lease_token,
                disposition=pb.FAIL_DISPOSITION_RELEASE,
                error=pb.JobError(
                    message="the worker shut down before the job finished", error_type=SHUTDOWN_ERROR_TYPE
                ),
            )
            held.done = True
            self._running -= 1
            if held.task is not None:
                held.task.cancel()
            self._settle(held, fail)
        # Results in flight: wait a while for their Settled replies or unary answers.
        book = self._book
        await book.wait_for(
            lambda: not book.pending and not book.unary, max(5.0, self.heartbeat_interval * 2)
        )
        for key in [*book.pending, *book.unary]:
            log.error(
                "worker %s: the result of %s/%s was not settled before closing (the lease will expire "
                "and the job be retried)",
                self.worker_id,
                key[0],
                key[1],
            )
        stream = self._stream
        if stream is not None:
            stream.half_close()
            await book.wait_for(lambda: self._stream is not stream, 5.0)
            if self._stream is stream:
                stream.cancel()
        for t in list(book.unary.values()):
            t.cancel()
