"""Jobs for the dashboard to show, made through the Python SDK as an application makes them.

Dead jobs die the real way: a ``jobwire.sync.Worker`` leases them and its handler raises
``jobwire.NonRetryable`` (error type ``invalid_address``, dead reason NO_RETRY) or an error of
the application's own, ``TemplateMissing`` (error type = the class name; the job has one
attempt, so it dies ATTEMPTS_EXHAUSTED). Completed jobs are acked by the same worker; waiting
and delayed ones are enqueued once no worker listens; an active one is held by a worker that
runs until ``HeldLease.release``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import jobwire
import jobwire.sync
from jobwire import pb

WAIT_S = 30.0  # patience for the worker to settle what it was given; never a timing claim
TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"


class TemplateMissing(Exception):
    """An application's own error: the SDK reports it RETRY with error type ``TemplateMissing``."""


def wait_for(what: str, check: Callable[[], bool], timeout: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"not within {timeout} s: {what}")
        time.sleep(0.05)


def counts(client: jobwire.sync.Client, queue: str) -> pb.QueueStats:
    return client.queues.stats(queue)


def state_of(client: jobwire.sync.Client, queue: str, job_id: str) -> int:
    return client.get_job(queue, job_id).state


def _ack(ctx: jobwire.JobContext) -> None:
    return None


def _invalid_address(ctx: jobwire.JobContext) -> None:
    raise jobwire.NonRetryable(f"mailbox does not exist: {ctx.json()['to']}", error_type="invalid_address")


def _template_missing(ctx: jobwire.JobContext) -> None:
    raise TemplateMissing(f"template {ctx.json()['template']} not found")


HANDLERS: dict[str, Callable[[jobwire.JobContext], None]] = {
    "send-welcome": _ack,
    "send-receipt": _invalid_address,
    "send-digest": _template_missing,
}


def run_worker_until(
    client: jobwire.sync.Client, queue: str, done: Callable[[], bool], what: str, worker_id: str | None = None
) -> None:
    """Runs a worker with ``HANDLERS`` on ``queue`` until ``done()``, then stops it (gracefully)."""
    worker = jobwire.sync.Worker(client, [queue], concurrency=4, worker_id=worker_id, handle_signals=False)
    for name, fn in HANDLERS.items():
        worker.handle(name, fn)
    thread = threading.Thread(target=worker.run, name=f"worker-{queue}", daemon=True)
    thread.start()
    try:
        wait_for(what, done)
    finally:
        worker.stop()
        thread.join(WAIT_S)


@dataclass
class Dead:
    """Ids of the dead jobs made on one queue, by error type."""

    invalid_address: list[str] = field(default_factory=list)
    template_missing: list[str] = field(default_factory=list)

    @property
    def all(self) -> list[str]:
        return self.invalid_address + self.template_missing


def make_dead(
    client: jobwire.sync.Client,
    queue: str,
    invalid_address: Iterable[str],
    template_missing: Iterable[str] = (),
    completed: Iterable[str] = (),
) -> Dead:
    """Enqueues and runs the jobs: ``invalid_address`` ids die NO_RETRY (type ``invalid_address``),
    ``template_missing`` ids die ATTEMPTS_EXHAUSTED (type ``TemplateMissing``), ``completed``
    ids are acked. ``queue`` is new (no jobs yet). Returns once gRPC counts them all dead or
    completed."""
    dead = Dead(list(invalid_address), list(template_missing))
    done = list(completed)
    for i, job_id in enumerate(dead.invalid_address):
        client.enqueue(
            queue,
            "send-receipt",
            {"to": f"customer{i}@example.invalid", "order": 1000 + i},
            job_id=job_id,
            max_attempts=3,
            metadata={"traceparent": TRACEPARENT, "tenant": "acme"},
        )
    for job_id in dead.template_missing:
        client.enqueue(
            queue, "send-digest", {"template": "digest.html", "week": 48}, job_id=job_id, max_attempts=1
        )
    for i, job_id in enumerate(done):
        client.enqueue(queue, "send-welcome", {"to": f"user{i}@example.com"}, job_id=job_id)

    def settled() -> bool:
        s = counts(client, queue)
        return s.dead == len(dead.all) and s.completed == len(done)

    run_worker_until(client, queue, settled, f"{len(dead.all)} dead and {len(done)} completed on {queue}")
    return dead


class HeldLease:
    """A worker (``worker_id``) on ``queue`` that leases job ``job_id`` and holds it (ACTIVE)
    until :meth:`release`, which acks it and stops the worker."""

    def __init__(self, client: jobwire.sync.Client, queue: str, job_id: str, worker_id: str) -> None:
        self.release_event = threading.Event()
        self.worker = jobwire.sync.Worker(
            client, [queue], concurrency=2, worker_id=worker_id, handle_signals=False
        )

        def hold(ctx: jobwire.JobContext) -> None:
            while not (self.release_event.is_set() or ctx.cancelled_sync.is_set()):
                self.release_event.wait(0.2)

        self.worker.handle("render", hold)
        self.thread = threading.Thread(target=self.worker.run, name=f"held-{queue}", daemon=True)
        self.thread.start()
        client.enqueue(queue, "render", {"report": "q4", "format": "pdf"}, job_id=job_id)
        wait_for(f"{job_id} active", lambda: state_of(client, queue, job_id) == pb.JOB_STATE_ACTIVE)

    def release(self) -> None:
        self.release_event.set()
        self.worker.stop()
        self.thread.join(WAIT_S)
