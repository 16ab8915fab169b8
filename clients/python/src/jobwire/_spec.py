"""Building a JobSpec from Python values: payload encoding, durations, backoff."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from jobwire import pb
from jobwire.errors import Delay, duration


@dataclass(frozen=True)
class Backoff:
    """A job's retry backoff (DESIGN.md section 2).

    ``kind``: ``"fixed"`` (every retry waits ``delay``) or ``"exponential"`` (the retry after
    attempt n waits ``delay * 2**(n-1)``). ``delay`` and ``max_delay``: seconds or timedeltas;
    ``max_delay`` caps every computed delay. ``jitter`` in [0, 1]: the delay d is drawn from
    ``[(1 - jitter) * d, d]`` (1 is "full jitter").
    """

    kind: Literal["fixed", "exponential"] = "exponential"
    delay: Delay = 1.0
    jitter: float = 0.0
    max_delay: Delay | None = None

    def to_pb(self) -> pb.Backoff:
        """As the wire message."""
        kind = pb.BACKOFF_KIND_FIXED if self.kind == "fixed" else pb.BACKOFF_KIND_EXPONENTIAL
        out = pb.Backoff(kind=kind, delay=duration(self.delay), jitter=self.jitter)
        if self.max_delay is not None:
            out.max_delay.CopyFrom(duration(self.max_delay))
        return out


JSON_CONTENT_TYPE = "application/json"


def encode_payload(payload: Any, content_type: str | None) -> tuple[bytes, str]:
    """``bytes`` go as they are; ``str`` as UTF-8 (``text/plain; charset=utf-8`` unless given);
    anything else is JSON-encoded with content type ``application/json``."""
    if isinstance(payload, bytes | bytearray | memoryview):
        return bytes(payload), content_type or ""
    if isinstance(payload, str):
        return payload.encode(), content_type or "text/plain; charset=utf-8"
    return json.dumps(payload, separators=(",", ":")).encode(), content_type or JSON_CONTENT_TYPE


def job_spec(
    queue: str,
    name: str,
    payload: Any = b"",
    *,
    job_id: str | None = None,
    delay: Delay | None = None,
    priority: int = 0,
    max_attempts: int | None = None,
    backoff: Backoff | pb.Backoff | None = None,
    metadata: Mapping[str, str] | None = None,
    timeout: Delay | None = None,
    content_type: str | None = None,
    group_key: str | None = None,
    expire_at: datetime | None = None,
    ttl: Delay | None = None,
) -> pb.JobSpec:
    """A JobSpec for :meth:`jobwire.Client.enqueue` and :meth:`jobwire.Client.enqueue_batch`.

    ``job_id``: the idempotency key of the enqueue (an existing id returns the existing job,
    ``created=False``); ``None`` lets the server make one up. ``delay`` and ``timeout`` (the
    per-attempt timeout) are seconds or timedeltas. ``max_attempts`` counts runs, not retries
    (``None``: the queue's default). ``priority``: -1000 to 1000, higher first.
    ``group_key``: the job's group (a tenant, a customer: 1-128 bytes), leased round-robin with
    the queue's other groups and limited by the group's own concurrency and rate limit.
    ``expire_at`` (a timezone-aware datetime) or ``ttl`` (seconds or a timedelta from now, at
    most one of the two): a job not started by then is EXPIRED instead of run.
    """
    if expire_at is not None and ttl is not None:
        raise ValueError("give expire_at or ttl, not both")
    if expire_at is not None and expire_at.utcoffset() is None:
        raise ValueError("expire_at must be timezone-aware (e.g. datetime.now(timezone.utc) + ...)")
    data, ctype = encode_payload(payload, content_type)
    spec = pb.JobSpec(
        queue=queue,
        job_id=job_id or "",
        name=name,
        payload=data,
        content_type=ctype,
        metadata=dict(metadata or {}),
        priority=priority,
        group_key=group_key or "",
    )
    if delay is not None:
        spec.delay.CopyFrom(duration(delay))
    if max_attempts is not None:
        spec.max_attempts = max_attempts
    if backoff is not None:
        spec.backoff.CopyFrom(backoff if isinstance(backoff, pb.Backoff) else backoff.to_pb())
    if timeout is not None:
        spec.timeout.CopyFrom(duration(timeout))
    if expire_at is not None:
        spec.expire_time.FromDatetime(expire_at)
    if ttl is not None:
        spec.ttl.CopyFrom(duration(ttl))
    return spec
