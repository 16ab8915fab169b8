"""One WorkerService.Subscribe stream: a single writer (with heartbeats and a stall watchdog)
and a reader that hands each server message to the worker."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

import grpc
import grpc.aio

from jobwire import pb
from jobwire._aio import within

log = logging.getLogger("jobwire.worker")

Message = pb.SubscribeRequest


class StreamStalled(Exception):
    """A write to the stream did not complete within the stall timeout: the stream is replaced."""


class Stream:
    """A Subscribe call. Messages go out in order through one writer task; when nothing was
    sent for ``heartbeat_interval`` seconds the writer sends a Heartbeat (the server renews the
    stream's leases while it hears from it within ``--heartbeat-timeout``). A write that takes
    longer than ``stall_timeout`` counts as a stalled stream (the transport accepts nothing,
    e.g. a peer that stopped reading): the call is cancelled and the worker reconnects, so the
    worker's liveness is the stream's own, never a side channel's."""

    def __init__(
        self,
        stub: pb.WorkerServiceAsyncStub,
        gen: int,
        heartbeat_interval: float,
        stall_timeout: float,
        open_msg: pb.OpenStream,
        unanswered: Callable[[], float | None] = lambda: None,
    ) -> None:
        self.gen = gen
        self.unanswered = unanswered  # loop time of the oldest result without a Settled reply
        self.heartbeat_interval = heartbeat_interval
        self.stall_timeout = stall_timeout
        self.call: grpc.aio.StreamStreamCall[pb.SubscribeRequest, pb.SubscribeResponse] = stub.Subscribe()
        self.opened = False
        self.server_draining = False
        self.extended = False  # the worker renewed its carried leases after this opened
        self.stalled = False  # the watchdog cancelled the call
        self.cancelled_here = False  # cancel() ended the call
        self._writing_since: float | None = None  # loop time the pending write started
        self.closing = False
        self._out: asyncio.Queue[Message | None] = asyncio.Queue()
        self._out.put_nowait(pb.SubscribeRequest(open=open_msg))  # the first message, always

    def send(self, msg: Message) -> None:
        """Queues ``msg`` for the writer (in order)."""
        if not self.closing:
            self._out.put_nowait(msg)

    def half_close(self) -> None:
        """No more messages: the writer ends the request side once the queue is written."""
        if not self.closing:
            self.closing = True
            self._out.put_nowait(None)

    def cancel(self) -> None:
        """Ends the call at once; :meth:`run` then returns."""
        self.closing = True
        self.cancelled_here = True
        self.call.cancel()

    async def _writer(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            if self._out.empty():
                try:
                    msg = await within(self._out.get(), self.heartbeat_interval)
                except TimeoutError:
                    msg = pb.SubscribeRequest(heartbeat=pb.Heartbeat())
            else:
                msg = self._out.get_nowait()
            self._writing_since = loop.time()
            if msg is None:
                await self.call.done_writing()
                return
            await self.call.write(msg)
            self._writing_since = None

    async def _watchdog(self) -> None:
        """Cancels the call when a write has been pending, or a result has waited for its
        Settled reply, for ``stall_timeout`` seconds: the transport takes nothing, or the server
        answers nothing (a connection that went silent without a reset)."""
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(min(1.0, self.stall_timeout / 4))
            now = loop.time()
            writing, unanswered = self._writing_since, self.unanswered()
            if any(t is not None and now - t > self.stall_timeout for t in (writing, unanswered)):
                self.stalled = True
                self.call.cancel()
                return

    async def run(self, on_message: Callable[[Stream, pb.SubscribeResponse], None]) -> None:
        """Opens the stream and serves it until it ends. Returns when the server ends it
        normally; raises ``grpc.aio.AioRpcError`` (or :class:`StreamStalled`) otherwise."""
        writer = asyncio.create_task(self._writer(), name=f"jobwire-stream-writer-{self.gen}")
        watchdog = asyncio.create_task(self._watchdog(), name=f"jobwire-stream-watchdog-{self.gen}")

        def writer_done(task: asyncio.Task[None]) -> None:
            if not task.cancelled() and task.exception() is not None:
                self.call.cancel()  # ends the read below

        writer.add_done_callback(writer_done)
        try:
            # The server answers the open with its headers (or ends the call with a refusal).
            await self.call.initial_metadata()
            # A refusal comes trailers-only: the call is over with its headers, never opened
            # (so it does not reset the reconnect backoff).
            self.opened = not self.call.done()
            try:
                async for resp in self.call:
                    on_message(self, resp)
            except (grpc.aio.AioRpcError, asyncio.CancelledError):
                # A call cancelled here (grpc.aio then raises CancelledError from the read) ends
                # for the reason it was cancelled; any other cancellation is the caller's.
                if self.stalled:
                    raise StreamStalled(f"no progress for {self.stall_timeout} s") from None
                if writer.done() and not writer.cancelled() and writer.exception() is not None:
                    raise writer.exception() from None  # type: ignore[misc]
                if self.cancelled_here:
                    return
                raise
        finally:
            for task in (writer, watchdog):
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            if not self.call.done():
                self.call.cancel()
