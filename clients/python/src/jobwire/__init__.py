"""jobwire: the Python SDK of the jobwire job server.

* :class:`Client` (asyncio, ``grpc.aio``): enqueue jobs, read them, administer dead letters and
  queues. :mod:`jobwire.sync` has the same for blocking scripts.
* :class:`Worker`: leases jobs over a Subscribe stream and runs a handler per job name, with
  concurrency as credits, heartbeats, reconnects and a graceful shutdown on SIGTERM.
* :class:`NonRetryable`, :class:`RetryAfter`, :class:`RateLimited`: what a handler raises to
  choose how its job fails; :class:`LeaseLost` and :class:`ReportRefused`: what a progress
  report raises when the server refuses it.
* Job control: ``Client.cancel_job`` / ``cancel_jobs`` / ``delete_job``, ``client.groups``;
  a handler sees a cancel in ``ctx.cancelled``, reports with ``ctx.progress`` /
  ``ctx.save_checkpoint`` and returns a result.
* :mod:`jobwire.testing`: run a handler on a fake lease; start a real server for tests.
* :mod:`jobwire.pb`: the generated messages and stubs.
"""

from jobwire._admin import rate_limit
from jobwire._book import WorkerStats
from jobwire._channel import TLS, Keepalive, read_token
from jobwire._spec import Backoff, job_spec
from jobwire._status import not_replicated_job_id
from jobwire.client import CancelCount, Client
from jobwire.context import JobContext
from jobwire.errors import (
    JobwireError,
    LeaseLost,
    NonRetryable,
    RateLimited,
    ReportRefused,
    RetryAfter,
)
from jobwire.worker import SubscribeRefused, Worker

__all__ = [
    "TLS",
    "Backoff",
    "CancelCount",
    "Client",
    "JobContext",
    "JobwireError",
    "Keepalive",
    "LeaseLost",
    "NonRetryable",
    "RateLimited",
    "ReportRefused",
    "RetryAfter",
    "SubscribeRefused",
    "Worker",
    "WorkerStats",
    "job_spec",
    "not_replicated_job_id",
    "rate_limit",
    "read_token",
]
__version__ = "0.1.0"
