"""A raw Subscribe stream driven message by message, for the server's protocol tests.

Applications use ``jobwire.Worker`` (clients/python), which runs handlers, credits, heartbeats
and reconnects for them. These tests need the wire itself: they send an ack, a fail or a credit
when they choose, and read every ``lease`` and ``settled`` message the server answers. ``Worker``
here runs one ``WorkerService.Subscribe`` stream in background threads on a blocking channel
(``jobwire.sync.connect``), with the SDK's generated messages (``jobwire.pb``).
"""

from __future__ import annotations

import queue
import threading
import time
import traceback
from datetime import timedelta
from typing import Callable, Iterator, Optional

import grpc
from google.protobuf import duration_pb2

from jobwire import pb as _pb


def ms(milliseconds: float) -> duration_pb2.Duration:
    """A google.protobuf.Duration of that many milliseconds."""
    d = duration_pb2.Duration()
    d.FromTimedelta(timedelta(milliseconds=milliseconds))
    return d


def state_name(state: int) -> str:
    """JOB_STATE_COMPLETED -> "COMPLETED" (works for unknown numbers too)."""
    try:
        return _pb.JobState.Name(state).removeprefix("JOB_STATE_")
    except ValueError:
        return str(state)


Handler = Callable[["Worker", object], None]
_CLOSE = object()


class Worker:
    """One WorkerService.Subscribe stream run by background threads.

    The stream opens with ``open{queues, credits, worker_id}``. Requests (acks, fails, credits,
    heartbeats, drain) are put on a queue that feeds the stream. A reader thread sorts what the
    server sends: ``lease`` messages go to ``self.leases`` (or to ``handler(worker, lease)`` on a
    handler thread, one lease at a time), ``settled`` messages to ``self.settled``; ``draining``
    sets ``self.draining``. A stream that ends with an error stores it in ``self.error``.
    """

    def __init__(
        self,
        channel: grpc.Channel,
        queues: list[str],
        credits: int = 1,
        worker_id: str = "",
        handler: Optional[Handler] = None,
    ):
        self.pb = _pb
        self.queues = list(queues)
        self.worker_id = worker_id
        self.leases: "queue.Queue[object]" = queue.Queue()
        self.settled: "queue.Queue[object]" = queue.Queue()
        self.draining = threading.Event()
        self.done = threading.Event()
        self.error: Optional[grpc.RpcError] = None
        self.handler_errors: list[str] = []
        self._requests: "queue.Queue[object]" = queue.Queue()
        self._closing = False
        self._handler = handler
        self._requests.put(
            self.pb.SubscribeRequest(
                open=self.pb.OpenStream(queues=self.queues, credits=credits, worker_id=worker_id)
            )
        )
        self._call = self.pb.WorkerServiceStub(channel).Subscribe(self._outgoing())
        self._reader = threading.Thread(target=self._read, name=f"jobwire-reader-{worker_id}", daemon=True)
        self._reader.start()
        self._handler_thread: Optional[threading.Thread] = None
        if handler is not None:
            self._handler_thread = threading.Thread(
                target=self._handle, name=f"jobwire-handler-{worker_id}", daemon=True
            )
            self._handler_thread.start()

    # --- threads ---

    def _outgoing(self) -> Iterator[object]:
        while True:
            item = self._requests.get()
            if item is _CLOSE:
                return
            yield item

    def _read(self) -> None:
        try:
            for resp in self._call:
                kind = resp.WhichOneof("message")
                if kind == "lease":
                    self.leases.put(resp.lease)
                elif kind == "settled":
                    self.settled.put(resp.settled)
                elif kind == "draining":
                    self.draining.set()
        except grpc.RpcError as e:
            if not (self._closing and e.code() == grpc.StatusCode.CANCELLED):
                self.error = e
        finally:
            self.done.set()
            self.leases.put(None)  # wakes the handler thread and next_lease()

    def _handle(self) -> None:
        assert self._handler is not None
        while True:
            lease = self.leases.get()
            if lease is None:
                return
            try:
                self._handler(self, lease)
            except Exception as e:  # a handler bug: fail the attempt so the job is retried
                self.handler_errors.append(traceback.format_exc())
                self.fail(lease, f"handler raised {type(e).__name__}: {e}", error_type="handler_exception")

    # --- sending ---

    def send(self, request) -> None:
        """Puts a raw SubscribeRequest on the stream."""
        self._requests.put(request)

    def ack(self, lease) -> None:
        self.send(
            self.pb.SubscribeRequest(
                ack=self.pb.AckRequest(queue=lease.job.queue, job_id=lease.job.job_id, lease_token=lease.lease_token)
            )
        )

    def fail(
        self,
        lease,
        message: str,
        error_type: str = "",
        disposition: Optional[int] = None,
        details: str = "",
        retry_after=None,
    ) -> None:
        """Fails the lease's attempt; ``disposition`` defaults to FAIL_DISPOSITION_RETRY."""
        req = self.pb.FailRequest(
            queue=lease.job.queue,
            job_id=lease.job.job_id,
            lease_token=lease.lease_token,
            disposition=self.pb.FAIL_DISPOSITION_RETRY if disposition is None else disposition,
            error=self.pb.JobError(message=message, error_type=error_type, details=details),
        )
        if retry_after is not None:
            req.retry_after.CopyFrom(retry_after)
        self.send(self.pb.SubscribeRequest(fail=req))

    def grant_credits(self, credits: int) -> None:
        self.send(self.pb.SubscribeRequest(grant_credits=self.pb.GrantCredits(credits=credits)))

    def heartbeat(self) -> None:
        self.send(self.pb.SubscribeRequest(heartbeat=self.pb.Heartbeat()))

    def drain(self) -> None:
        self.send(self.pb.SubscribeRequest(drain=self.pb.DrainStream()))

    # --- receiving ---

    def next_lease(self, timeout: float = 10.0):
        """The next lease; raises TimeoutError, or the stream's error if it ended."""
        if self._handler is not None:
            raise RuntimeError("this worker has a handler: leases go to it")
        try:
            lease = self.leases.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError(f"no lease within {timeout} s on {self.queues}") from None
        if lease is None:
            self.leases.put(None)  # keep the end marker for later calls
            if self.error is not None:
                raise self.error
            raise EOFError("the Subscribe stream ended")
        return lease

    def next_settled(self, timeout: float = 10.0):
        """The next Settled result; raises TimeoutError, or the stream's error if it ended."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                return self.settled.get(timeout=0.05)
            except queue.Empty:
                pass
            if self.done.is_set() and self.settled.empty():
                if self.error is not None:
                    raise self.error
                raise EOFError("the Subscribe stream ended")
            if time.monotonic() >= deadline:
                raise TimeoutError(f"no settled result within {timeout} s")

    def drain_settled(self) -> list:
        """Every Settled result received so far, without waiting."""
        out = []
        while True:
            try:
                out.append(self.settled.get_nowait())
            except queue.Empty:
                return out

    # --- lifecycle ---

    def half_close(self) -> None:
        """Ends the request side of the stream (no more acks or fails); the server then ends it."""
        if not self._closing:
            self._closing = True
            self._requests.put(_CLOSE)

    def close(self, timeout: float = 3.0) -> None:
        """Half-closes the stream, waits up to ``timeout`` for the server to end it, then cancels."""
        self.half_close()
        if not self.done.wait(timeout):
            self._call.cancel()
            self.done.wait(timeout)
        self._reader.join(timeout)
        if self._handler_thread is not None:
            self._handler_thread.join(timeout)

    def cancel(self) -> None:
        """Drops the stream at once, as a crashed worker would."""
        self._closing = True
        self._call.cancel()
        self.done.wait(3.0)

    def __enter__(self) -> "Worker":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
