"""What a handler gets: the leased job, its attempt, idempotency key, and a cancellation signal."""

from __future__ import annotations

import asyncio
import json
import threading
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from jobwire import pb


@dataclass
class JobContext:
    """One leased attempt of a job, as its handler sees it.

    ``cancelled`` (an ``asyncio.Event``, for async handlers) and ``cancelled_sync`` (a
    ``threading.Event``, for handlers running in the worker's thread pool) are set together when
    the handler should stop: the worker's shutdown grace ran out, or the lease was lost (another
    worker may run the job now). The SDK cancels an async handler's task too; a sync handler must
    look at ``cancelled_sync`` itself. What a handler returns after that is dropped.
    """

    lease: pb.Lease
    worker_id: str = ""
    cancelled: asyncio.Event = field(default_factory=asyncio.Event)
    cancelled_sync: threading.Event = field(default_factory=threading.Event)

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

    def json(self) -> Any:
        """The payload decoded as JSON."""
        return json.loads(self.lease.job.payload)

    def cancel(self) -> None:
        """Sets both cancellation events (the worker calls this)."""
        self.cancelled_sync.set()
        self.cancelled.set()
