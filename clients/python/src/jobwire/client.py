"""The asyncio producer client: enqueue, read jobs, and the dead-letter and queue services."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from types import TracebackType
from typing import Any

import grpc.aio

from jobwire import pb
from jobwire._admin import DeadLetters, Groups, Queues
from jobwire._backoff import DEFAULT_TRIES, retry_unavailable
from jobwire._channel import DEFAULT_KEEPALIVE, TLS, Keepalive, aio_channel
from jobwire._spec import Backoff, job_spec
from jobwire._status import not_replicated_job_id
from jobwire.errors import Delay

DEFAULT_TIMEOUT = 30.0
"""Deadline of each unary call, in seconds."""


@dataclass(frozen=True)
class CancelCount:
    """What :meth:`Client.cancel_jobs` did."""

    cancelled: int
    """WAITING and DELAYED jobs moved to CANCELLED."""
    signalled: int
    """ACTIVE jobs whose workers were told to stop (CANCELLED once they settle, or after the
    queue's ``cancel_grace``)."""

    @property
    def total(self) -> int:
        return self.cancelled + self.signalled


class Client:
    """A connection to a jobwire server, for producers and for :class:`jobwire.Worker`.

    ``target``: ``HOST:PORT`` of the gRPC port. ``token``: a bearer token (``jw_<id>_<secret>``,
    from ``jobwire token new``) sent as ``authorization: Bearer <token>`` with every call; over
    plaintext only to a loopback address (gRPC refuses to send it in clear text elsewhere).
    ``tls``: :class:`jobwire.TLS` (CA, optional client certificate for mTLS); ``None`` is
    plaintext. ``timeout``: seconds each unary call may take. ``keepalive``: the channel's HTTP/2
    keepalive, a :class:`jobwire.Keepalive` (default: a PING every 10 s, also without calls, the
    connection closed and replaced when one goes unanswered 5 s, so a frozen or vanished server
    is noticed within 15 s), or a number: the interval in seconds, the timeout half that.

    The channel is made on first use inside the running event loop; ``async with Client(...)``
    or :meth:`close` closes it. Calls raise ``grpc.aio.AioRpcError`` with the server's status
    code (INVALID_ARGUMENT, NOT_FOUND, PERMISSION_DENIED, ...). Calls that are safe to repeat
    are retried on UNAVAILABLE with full-jitter backoff (0.1 s doubling, capped at 2 s),
    ``unavailable_tries`` times in all (default 5, so an unreachable server is reported within
    about 1.5 s; 1 = no retry): reads, admin calls, a batch (the server writes none of it or
    answers per item) and an enqueue with a ``job_id`` (which makes it idempotent). An enqueue
    without one is retried only after NOT_REPLICATED (``--redis-wait-replicas``: the job was
    written on the master), with the ``job_id`` the error names, so the retry finds that job.
    """

    def __init__(
        self,
        target: str,
        token: str | None = None,
        tls: TLS | None = None,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        keepalive: float | Keepalive = DEFAULT_KEEPALIVE,
        unavailable_tries: int = DEFAULT_TRIES,
    ) -> None:
        self.target = target
        self.token = token
        self.tls = tls
        self.timeout = timeout
        self.keepalive = keepalive
        self.unavailable_tries = unavailable_tries
        self._channel: grpc.aio.Channel | None = None

    # === connection ===

    @property
    def channel(self) -> grpc.aio.Channel:
        """The asyncio channel (made on first use), for calls the SDK does not wrap."""
        if self._channel is None:
            self._channel = aio_channel(self.target, self.token, self.tls, self.keepalive)
        return self._channel

    async def close(self) -> None:
        """Closes the channel; calls still running are cancelled."""
        if self._channel is not None:
            channel, self._channel = self._channel, None
            await channel.close()

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def wait_ready(self, timeout: float = 10.0) -> None:
        """Waits until the server's gRPC health check says SERVING; raises TimeoutError."""
        from jobwire._health import wait_serving

        await wait_serving(self.channel, timeout)

    @property
    def jobs(self) -> pb.JobServiceAsyncStub:
        """The generated JobService stub on this channel."""
        return pb.JobServiceStub(self.channel)

    @property
    def workers(self) -> pb.WorkerServiceAsyncStub:
        """The generated WorkerService stub on this channel."""
        return pb.WorkerServiceStub(self.channel)

    @property
    def dead_letters(self) -> DeadLetters:
        """The DeadLetterService: list, get, replay, delete dead jobs."""
        return DeadLetters(self.channel, self.timeout, self.unavailable_tries)

    @property
    def queues(self) -> Queues:
        """The QueueService: stats, pause/resume, config, purge, delete."""
        return Queues(self.channel, self.timeout, self.unavailable_tries)

    @property
    def groups(self) -> Groups:
        """The GroupService: a queue's groups (tenants): list, get, config, pause, resume."""
        return Groups(self.channel, self.timeout, self.unavailable_tries)

    # === JobService ===

    async def enqueue(
        self,
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
    ) -> pb.EnqueueResponse:
        """Creates a job named ``name`` (the job type handlers register for) on ``queue``.

        ``payload``: ``bytes`` as they are, ``str`` as UTF-8, anything else JSON-encoded with
        content type ``application/json``. The options are :func:`jobwire.job_spec`'s. Returns
        the job as stored and ``created`` (False when ``job_id`` already existed: nothing
        changed, the existing job is returned).
        """
        spec = job_spec(
            queue,
            name,
            payload,
            job_id=job_id,
            delay=delay,
            priority=priority,
            max_attempts=max_attempts,
            backoff=backoff,
            metadata=metadata,
            timeout=timeout,
            content_type=content_type,
            group_key=group_key,
            expire_at=expire_at,
            ttl=ttl,
        )
        return await self.enqueue_spec(spec)

    async def enqueue_spec(self, spec: pb.JobSpec) -> pb.EnqueueResponse:
        """Enqueues a prepared JobSpec (see :func:`jobwire.job_spec`).

        Without a ``job_id`` the server chooses the id and the call is not repeated, except
        after UNAVAILABLE with reason NOT_REPLICATED: the server wrote the job on the Redis
        master and names its id (:func:`jobwire.not_replicated_job_id`), and the retries carry
        that id, so they find the job (``created`` stays True: this call created it). Once the
        tries are spent the last error is raised; it names the id too."""

        def call_with(s: pb.JobSpec) -> Callable[[], Awaitable[pb.EnqueueResponse]]:
            request = pb.EnqueueRequest(job=s)

            async def call() -> pb.EnqueueResponse:
                return await self.jobs.Enqueue(request, timeout=self.timeout)

            return call

        if spec.job_id:
            return await retry_unavailable(call_with(spec), self.unavailable_tries)
        try:
            return await call_with(spec)()
        except grpc.aio.AioRpcError as e:
            job_id = not_replicated_job_id(e)
            if job_id is None or self.unavailable_tries <= 1:
                raise
        named = pb.JobSpec()
        named.CopyFrom(spec)
        named.job_id = job_id
        response = await retry_unavailable(call_with(named), self.unavailable_tries - 1)
        response.created = True
        return response

    async def enqueue_batch(self, specs: Iterable[pb.JobSpec]) -> list[pb.EnqueueResult]:
        """Enqueues up to 1000 jobs in one call; one result per spec, in order.

        Each item succeeds or fails on its own: a refused item has ``error`` set (a google.rpc
        code, a message and the offending field) and the others are written.
        """
        request = pb.EnqueueBatchRequest(jobs=list(specs))

        async def call() -> pb.EnqueueBatchResponse:
            return await self.jobs.EnqueueBatch(request, timeout=self.timeout)

        return list((await retry_unavailable(call, self.unavailable_tries)).results)

    async def get_job(self, queue: str, job_id: str) -> pb.Job:
        """The job with its state, attempts and error history; NOT_FOUND if there is none. Job
        control adds ``group_key``, ``expire_time``, ``progress``, ``progress_message``,
        ``progress_time``, ``checkpoint``, ``result`` (COMPLETED), ``cancel_time`` and
        ``cancel_reason``, and for an ACTIVE job ``lease_deadline`` and ``worker_id``."""
        request = pb.GetJobRequest(queue=queue, job_id=job_id)

        async def call() -> pb.GetJobResponse:
            return await self.jobs.GetJob(request, timeout=self.timeout)

        return (await retry_unavailable(call, self.unavailable_tries)).job

    async def list_jobs(
        self,
        queue: str,
        state: pb.JobState.ValueType,
        *,
        page_size: int = 100,
        page_token: str = "",
        filter: pb.ListJobsFilter | None = None,
    ) -> pb.ListJobsResponse:
        """One page of ``queue``'s jobs in ``state`` (``jobwire.pb.JOB_STATE_WAITING``, ``DELAYED``,
        ``ACTIVE``, ``COMPLETED`` or ``DEAD``), in that state's order: waiting in lease order,
        delayed by due time, active by lease deadline, completed by finish time, dead by death
        time. Jobs come without their payload (:meth:`get_job` has it). ``filter``: a
        ``jobwire.pb.ListJobsFilter`` (name, ``after`` / ``before`` over that same time). Pass
        ``next_page_token`` on until it is empty."""
        request = pb.ListJobsRequest(
            queue=queue, state=state, page_size=page_size, page_token=page_token, filter=filter
        )

        async def call() -> pb.ListJobsResponse:
            return await self.jobs.ListJobs(request, timeout=self.timeout)

        return await retry_unavailable(call, self.unavailable_tries)

    async def iterate_jobs(
        self, queue: str, state: pb.JobState.ValueType, *, filter: pb.ListJobsFilter | None = None
    ) -> AsyncIterator[pb.Job]:
        """Every job of ``queue`` in ``state`` (matching ``filter``), page after page."""
        token = ""
        while True:
            page = await self.list_jobs(queue, state, page_size=1000, page_token=token, filter=filter)
            for job in page.jobs:
                yield job
            token = page.next_page_token
            if not token:
                return

    async def list_workers(self, queue: str = "") -> pb.ListWorkersResponse:
        """Every replica's worker streams (replica, stream id, worker id, queues, free credits,
        held leases, connected since, last heard); with ``queue``, only the streams that lease
        from it. Other replicas' streams are up to one report interval (5 s) old."""
        request = pb.ListWorkersRequest(queue=queue)

        stub: pb.QueueServiceAsyncStub = pb.QueueServiceStub(self.channel)

        async def call() -> pb.ListWorkersResponse:
            return await stub.ListWorkers(request, timeout=self.timeout)

        return await retry_unavailable(call, self.unavailable_tries)

    # === job control ===

    async def cancel_job(self, queue: str, job_id: str, reason: str = "") -> tuple[pb.Job, bool]:
        """Cancels a job: a WAITING or DELAYED one is CANCELLED at once; an ACTIVE one's worker
        is told (its handler's ``ctx.cancelled`` is set) and the job ends CANCELLED when it
        settles, or when the queue's ``cancel_grace`` runs out. ``reason`` (up to 1024 bytes) is
        recorded on the job. Returns the job after the call and whether this call cancelled it
        (False: it had finished already, or a cancel was pending). NOT_FOUND for an unknown
        job. Retried on UNAVAILABLE (a repeat finds the cancel done and says False)."""
        request = pb.CancelJobRequest(queue=queue, job_id=job_id, reason=reason)

        async def call() -> pb.CancelJobResponse:
            return await self.jobs.CancelJob(request, timeout=self.timeout)

        resp = await retry_unavailable(call, self.unavailable_tries)
        return resp.job, resp.cancelled

    async def cancel_jobs_page(
        self,
        queue: str,
        *,
        name: str = "",
        group_key: str = "",
        metadata_key: str = "",
        metadata_value: str | None = None,
        reason: str = "",
        limit: int = 0,
        page_token: str = "",
    ) -> pb.CancelJobsResponse:
        """One CancelJobs call: cancels up to ``limit`` (1 to 10000; 0: 1000) WAITING, DELAYED
        and ACTIVE jobs of ``queue`` matching every filter given (at least one: job ``name``,
        ``group_key``, ``metadata_key``, with ``metadata_value``); pass ``next_page_token`` on
        until it is empty (:meth:`cancel_jobs` does)."""
        request = pb.CancelJobsRequest(
            queue=queue,
            filter=pb.JobFilter(
                name=name, group_key=group_key, metadata_key=metadata_key, metadata_value=metadata_value
            ),
            reason=reason,
            limit=limit,
            page_token=page_token,
        )

        async def call() -> pb.CancelJobsResponse:
            return await self.jobs.CancelJobs(request, timeout=self.timeout)

        return await retry_unavailable(call, self.unavailable_tries)

    async def cancel_jobs(
        self,
        queue: str,
        *,
        name: str = "",
        group_key: str = "",
        metadata_key: str = "",
        metadata_value: str | None = None,
        reason: str = "",
        limit: int = 0,
    ) -> CancelCount:
        """Cancels every WAITING, DELAYED and ACTIVE job of ``queue`` that matches (see
        :meth:`cancel_jobs_page`, called until every matching job was reached, ``limit`` per
        call); returns the counts."""
        cancelled = signalled = 0
        token = ""
        while True:
            page = await self.cancel_jobs_page(
                queue,
                name=name,
                group_key=group_key,
                metadata_key=metadata_key,
                metadata_value=metadata_value,
                reason=reason,
                limit=limit,
                page_token=token,
            )
            cancelled += page.cancelled
            signalled += page.signalled
            token = page.next_page_token
            if not token:
                return CancelCount(cancelled, signalled)

    async def delete_job(self, queue: str, job_id: str) -> pb.JobState.ValueType:
        """Deletes a job that is not ACTIVE (FAILED_PRECONDITION: cancel it first) with its
        history, checkpoint and result; its id is free for a new enqueue at once. Returns the
        state it was in. NOT_FOUND for an unknown job (not retried: a repeat after a lost reply
        would say NOT_FOUND)."""
        request = pb.DeleteJobRequest(queue=queue, job_id=job_id)
        return (await self.jobs.DeleteJob(request, timeout=self.timeout)).state
