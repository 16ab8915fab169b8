"""What a handler raises to say how its job failed, and how that becomes a Fail.

* :class:`NonRetryable`: the error is permanent (a 400 from the provider, a malformed payload):
  ``FAIL_DISPOSITION_NO_RETRY``, the job goes straight to the dead-letter queue, whatever
  attempts remain (Temporal's ``non_retryable`` errors).
* :class:`RetryAfter`: retry, but not before ``delay`` seconds (``FAIL_DISPOSITION_RETRY`` with
  ``retry_after``, which overrides the job's backoff for this retry; an attempt is used).
* :class:`RateLimited`: the downstream said "slow down" (HTTP 429):
  ``FAIL_DISPOSITION_RATE_LIMITED``: the job comes back after ``delay`` seconds **without** using
  an attempt; ``pause_queue=True`` also pauses the whole queue that long, on every replica;
  ``pause_group=True`` pauses only the job's group (its tenant) that long.
* Any other exception: ``FAIL_DISPOSITION_RETRY`` with the exception's type name as
  ``error_type``, ``str(exc)`` as the message and the traceback, cut to 8 KiB, as details; the
  job's retry policy decides what follows.
"""

from __future__ import annotations

import traceback
from datetime import timedelta

import grpc
from google.protobuf import duration_pb2

from jobwire import pb

MAX_DETAILS_BYTES = 8 * 1024
"""Tracebacks sent as a failed attempt's details are cut to this many bytes (UTF-8)."""
MAX_ERROR_TYPE_BYTES = 128
"""The server refuses a longer error_type (INVALID_ARGUMENT), so the SDK cuts it."""

Delay = float | timedelta
"""A delay in seconds (``float``) or a ``timedelta``."""


def seconds(delay: Delay) -> float:
    """``delay`` in seconds."""
    return delay.total_seconds() if isinstance(delay, timedelta) else float(delay)


def duration(delay: Delay) -> duration_pb2.Duration:
    """``delay`` as a google.protobuf.Duration (millisecond precision)."""
    d = duration_pb2.Duration()
    d.FromMilliseconds(round(seconds(delay) * 1000))
    return d


class JobwireError(Exception):
    """Base of the SDK's own exceptions."""


class HandlerError(JobwireError):
    """Base of the exceptions a handler raises to choose how its job fails."""

    error_type: str | None

    def __init__(self, message: str = "", *, error_type: str | None = None) -> None:
        super().__init__(message)
        self.error_type = error_type


class NonRetryable(HandlerError):
    """A permanent failure: the job is dead-lettered now (``FAIL_DISPOSITION_NO_RETRY``).

    ``error_type`` defaults to the exception's class name.
    """


class RetryAfter(HandlerError):
    """Retry the job, no sooner than ``delay`` (seconds or a timedelta; 0 to 7 days).

    The retry uses an attempt; ``delay`` replaces the job's backoff for this retry.
    """

    def __init__(self, delay: Delay, message: str = "", *, error_type: str | None = None) -> None:
        super().__init__(message or f"retry after {seconds(delay):g} s", error_type=error_type)
        self.delay = delay


class RateLimited(HandlerError):
    """The downstream is rate limiting: the job comes back after ``delay`` without using an attempt.

    ``pause_queue=True`` pauses leasing on the whole queue for ``delay`` on every server replica
    (the limit is the downstream's, so every worker of the queue should back off).
    ``pause_group=True`` pauses only the job's group (``group_key``: the tenant whose limit was
    hit) for ``delay``; the other groups of the queue go on.
    """

    def __init__(
        self,
        delay: Delay,
        message: str = "",
        *,
        pause_queue: bool = False,
        pause_group: bool = False,
        error_type: str | None = None,
    ) -> None:
        super().__init__(message or f"rate limited for {seconds(delay):g} s", error_type=error_type)
        self.delay = delay
        self.pause_queue = pause_queue
        self.pause_group = pause_group


class LeaseLost(JobwireError):
    """The attempt's lease is gone (it expired, or a cancelled job's lease was revoked after the
    queue's ``cancel_grace``): another worker may run the job now, and what this attempt reports
    or returns is dropped. Raised by :meth:`jobwire.JobContext.report` and friends."""


class ReportRefused(JobwireError):
    """The server refused a progress report or checkpoint for another reason than a lost lease
    (``code``: ``grpc.StatusCode.INVALID_ARGUMENT`` for a progress above 100 or a message over
    256 bytes, ``RESOURCE_EXHAUSTED`` for a checkpoint over the server's limit, ...); nothing
    of that report was saved."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(f"progress report refused: {code.name}: {message}")
        self.code = code
        self.message = message


_CODES = {c.value[0]: c for c in grpc.StatusCode}


def status_code(value: int) -> grpc.StatusCode:
    """The ``grpc.StatusCode`` of a google.rpc code number (UNKNOWN for one it does not know)."""
    return _CODES.get(value, grpc.StatusCode.UNKNOWN)


def report_error(code: grpc.StatusCode, message: str) -> JobwireError:
    """What a refused progress report raises: :class:`LeaseLost` for FAILED_PRECONDITION (and
    NOT_FOUND: the job is gone), else :class:`ReportRefused`."""
    if code in (grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.NOT_FOUND):
        return LeaseLost(f"lease lost: {message}" if message else "lease lost")
    return ReportRefused(code, message)


def _cut_tail(text: str, limit: int) -> str:
    """The last ``limit`` bytes of ``text`` (whole characters), marked when something was cut."""
    raw = text.encode()
    if len(raw) <= limit:
        return text
    marker = f"…[truncated {len(raw) - limit} bytes]\n"
    kept = raw[len(raw) - limit + len(marker.encode()) :].decode(errors="ignore")
    return marker + kept


def _cut_head(text: str, limit: int) -> str:
    return text.encode()[:limit].decode(errors="ignore")


def fail_request(exc: BaseException) -> pb.FailRequest:
    """The FailRequest (without queue, job id and lease token) that ``exc`` stands for."""
    req = pb.FailRequest()
    error_type = getattr(exc, "error_type", None) or type(exc).__name__
    req.error.error_type = _cut_head(error_type, MAX_ERROR_TYPE_BYTES)
    req.error.message = str(exc) or type(exc).__name__
    if isinstance(exc, RateLimited):
        req.disposition = pb.FAIL_DISPOSITION_RATE_LIMITED
        req.retry_after.CopyFrom(duration(exc.delay))
        req.pause_queue = exc.pause_queue
        req.pause_group = exc.pause_group
        return req
    if isinstance(exc, RetryAfter):
        req.disposition = pb.FAIL_DISPOSITION_RETRY
        req.retry_after.CopyFrom(duration(exc.delay))
        return req
    req.disposition = (
        pb.FAIL_DISPOSITION_NO_RETRY if isinstance(exc, NonRetryable) else pb.FAIL_DISPOSITION_RETRY
    )
    trace = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    req.error.details = _cut_tail(trace, MAX_DETAILS_BYTES)
    return req


CANCELLED_ERROR_TYPE = "cancelled"
"""error_type of the Fail the worker sends for a job cancelled while its handler ran (the
server ends it CANCELLED whatever the disposition)."""


def cancelled_fail(reason: str) -> pb.FailRequest:
    """The Fail (without queue, job id and lease token) that settles a job whose handler stopped
    after a CancelLease: NO_RETRY, error_type ``cancelled``, the cancel's reason as message."""
    req = pb.FailRequest(disposition=pb.FAIL_DISPOSITION_NO_RETRY)
    req.error.error_type = CANCELLED_ERROR_TYPE
    req.error.message = f"cancelled: {reason}" if reason else "cancelled"
    return req
