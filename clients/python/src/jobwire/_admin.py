"""Thin wrappers of the DeadLetterService, the QueueService and the GroupService (retried on
UNAVAILABLE)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from datetime import datetime, timezone

import grpc.aio
from google.protobuf import field_mask_pb2

from jobwire import pb
from jobwire._backoff import retry_unavailable
from jobwire.errors import Delay
from jobwire.errors import duration as to_duration


class DeadLetters:
    """The dead-letter queue of each queue: what failed for good, to inspect, replay or delete.

    Every call is safe to repeat (a replay of an id that is no longer dead is skipped), so each is
    retried on UNAVAILABLE. ``filter`` takes a ``jobwire.pb.DeadLetterFilter`` (job name, error
    type, dead reason, message prefix, time range).
    """

    def __init__(self, channel: grpc.aio.Channel, timeout: float, tries: int) -> None:
        self._stub = pb.DeadLetterServiceStub(channel)
        self._timeout = timeout
        self._tries = tries

    async def list_page(
        self,
        queue: str,
        *,
        page_size: int = 100,
        page_token: str = "",
        filter: pb.DeadLetterFilter | None = None,
    ) -> pb.ListDeadLettersResponse:
        """One page of dead jobs, oldest death first; ``next_page_token`` is empty on the last page."""
        req = pb.ListDeadLettersRequest(
            queue=queue, page_size=page_size, page_token=page_token, filter=filter
        )
        return await retry_unavailable(
            lambda: self._stub.ListDeadLetters(req, timeout=self._timeout), self._tries
        )

    async def iterate(
        self, queue: str, *, filter: pb.DeadLetterFilter | None = None
    ) -> AsyncIterator[pb.Job]:
        """Every dead job of ``queue`` (matching ``filter``), page after page."""
        token = ""
        while True:
            page = await self.list_page(queue, page_token=token, filter=filter)
            for job in page.dead_letters:
                yield job
            token = page.next_page_token
            if not token:
                return

    async def list(self, queue: str, *, filter: pb.DeadLetterFilter | None = None) -> list[pb.Job]:
        """Every dead job of ``queue`` (matching ``filter``), all pages read."""
        return [job async for job in self.iterate(queue, filter=filter)]

    async def get(self, queue: str, job_id: str) -> pb.Job:
        """One dead job with its whole error history; NOT_FOUND if it is not dead."""
        req = pb.GetDeadLetterRequest(queue=queue, job_id=job_id)
        resp = await retry_unavailable(
            lambda: self._stub.GetDeadLetter(req, timeout=self._timeout), self._tries
        )
        return resp.dead_letter

    async def replay(
        self, queue: str, job_ids: Iterable[str] = (), *, filter: pb.DeadLetterFilter | None = None
    ) -> pb.ReplayDeadLettersResponse:
        """Moves dead jobs (by id, or all matching ``filter``) back to waiting under their own id
        with a fresh attempt budget; ids no longer dead come back as skipped."""
        req = pb.ReplayDeadLettersRequest(queue=queue, job_ids=list(job_ids), filter=filter)
        return await retry_unavailable(
            lambda: self._stub.ReplayDeadLetters(req, timeout=self._timeout), self._tries
        )

    async def delete(
        self, queue: str, job_ids: Iterable[str] = (), *, filter: pb.DeadLetterFilter | None = None
    ) -> pb.DeleteDeadLettersResponse:
        """Deletes dead jobs for good (by id, or all matching ``filter``)."""
        req = pb.DeleteDeadLettersRequest(queue=queue, job_ids=list(job_ids), filter=filter)
        return await retry_unavailable(
            lambda: self._stub.DeleteDeadLetters(req, timeout=self._timeout), self._tries
        )


class Queues:
    """Queue administration: stats, pause and resume, config, purge and delete."""

    def __init__(self, channel: grpc.aio.Channel, timeout: float, tries: int) -> None:
        self._stub = pb.QueueServiceStub(channel)
        self._timeout = timeout
        self._tries = tries

    async def list(self) -> list[pb.QueueStats]:
        """Every known queue with its counts."""
        resp = await retry_unavailable(
            lambda: self._stub.ListQueues(pb.ListQueuesRequest(), timeout=self._timeout), self._tries
        )
        return list(resp.queues)

    async def stats(self, queue: str) -> pb.QueueStats:
        """Counts per state, oldest waiting and dead ages, paused, connected workers, config."""
        req = pb.GetQueueStatsRequest(queue=queue)
        return (
            await retry_unavailable(lambda: self._stub.GetQueueStats(req, timeout=self._timeout), self._tries)
        ).stats

    async def pause(self, queue: str) -> None:
        """Stops leasing from ``queue`` (enqueues are still accepted)."""
        req = pb.PauseQueueRequest(queue=queue)
        await retry_unavailable(lambda: self._stub.PauseQueue(req, timeout=self._timeout), self._tries)

    async def resume(self, queue: str) -> None:
        """Leases from ``queue`` again."""
        req = pb.ResumeQueueRequest(queue=queue)
        await retry_unavailable(lambda: self._stub.ResumeQueue(req, timeout=self._timeout), self._tries)

    async def get_config(self, queue: str) -> pb.QueueConfig:
        """The queue's defaults and limits."""
        req = pb.GetQueueConfigRequest(queue=queue)
        return (
            await retry_unavailable(
                lambda: self._stub.GetQueueConfig(req, timeout=self._timeout), self._tries
            )
        ).config

    async def update_config(self, queue: str, config: pb.QueueConfig, paths: Iterable[str]) -> pb.QueueConfig:
        """Sets the fields of ``config`` named in ``paths`` (a FieldMask, e.g.
        ``["default_max_attempts", "rate_limit"]``; job control adds ``group_max_active``,
        ``group_rate_limit``, ``cancel_grace`` and ``dead_letter_expired``); returns the whole
        new config. :func:`rate_limit` builds a ``RateLimit``."""
        req = pb.UpdateQueueConfigRequest(
            queue=queue, config=config, update_mask=field_mask_pb2.FieldMask(paths=list(paths))
        )
        return (
            await retry_unavailable(
                lambda: self._stub.UpdateQueueConfig(req, timeout=self._timeout), self._tries
            )
        ).config

    async def purge(self, queue: str, *, include_completed: bool = False, include_dead: bool = False) -> int:
        """Deletes the waiting and delayed jobs (and completed / dead ones if asked); returns how many."""
        req = pb.PurgeQueueRequest(
            queue=queue, include_completed=include_completed, include_dead=include_dead
        )
        return (
            await retry_unavailable(lambda: self._stub.PurgeQueue(req, timeout=self._timeout), self._tries)
        ).deleted

    async def delete(self, queue: str, *, force: bool = False) -> pb.DeleteQueueResponse:
        """Deletes the queue (``force``: even with jobs in it); returns what was removed."""
        req = pb.DeleteQueueRequest(queue=queue, force=force)
        return await retry_unavailable(
            lambda: self._stub.DeleteQueue(req, timeout=self._timeout), self._tries
        )


def rate_limit(max: int, period: Delay) -> pb.RateLimit:
    """A ``RateLimit``: at most ``max`` job starts per sliding ``period`` (seconds or a
    timedelta), for ``QueueConfig.rate_limit``, ``group_rate_limit`` and a group's own limit."""
    return pb.RateLimit(max=max, period=to_duration(period))


class Groups:
    """A queue's groups (a job's ``group_key``: a tenant, a customer): their numbers, their own
    weight, concurrency and rate limit, and pausing one group while the others go on."""

    def __init__(self, channel: grpc.aio.Channel, timeout: float, tries: int) -> None:
        self._stub = pb.GroupServiceStub(channel)
        self._timeout = timeout
        self._tries = tries

    async def list_page(
        self, queue: str, *, page_size: int = 100, page_token: str = ""
    ) -> pb.ListGroupsResponse:
        """One page of ``queue``'s groups with waiting or active jobs, most waiting first
        (``groups_waiting``: how many have waiting jobs); ``next_page_token`` is empty on the
        last page."""
        req = pb.ListGroupsRequest(queue=queue, page_size=page_size, page_token=page_token)
        return await retry_unavailable(lambda: self._stub.ListGroups(req, timeout=self._timeout), self._tries)

    async def iterate(self, queue: str) -> AsyncIterator[pb.GroupStats]:
        """Every group of ``queue`` with waiting or active jobs, page after page."""
        token = ""
        while True:
            page = await self.list_page(queue, page_size=1000, page_token=token)
            for group in page.groups:
                yield group
            token = page.next_page_token
            if not token:
                return

    async def list(self, queue: str) -> list[pb.GroupStats]:
        """Every group of ``queue`` with waiting or active jobs, all pages read."""
        return [g async for g in self.iterate(queue)]

    async def get(self, queue: str, group_key: str) -> pb.GroupStats:
        """One group's waiting and active counts, config and pause (a group with no jobs and no
        config of its own reads as empty, with the queue's defaults)."""
        req = pb.GetGroupRequest(queue=queue, group_key=group_key)
        resp = await retry_unavailable(lambda: self._stub.GetGroup(req, timeout=self._timeout), self._tries)
        return resp.group

    async def update_config(
        self,
        queue: str,
        group_key: str,
        *,
        weight: int | None = None,
        max_active: int | None = None,
        rate_limit: pb.RateLimit | None = None,
        reset: Iterable[str] = (),
    ) -> pb.GroupConfig:
        """Sets the group's own ``weight`` (1 to 1000: its share of leases among the groups with
        waiting jobs), ``max_active`` (its jobs leased at once) and ``rate_limit`` (see
        :func:`rate_limit`); only the ones given change. ``reset``: fields (``"weight"``,
        ``"max_active"``, ``"rate_limit"``) that go back to the queue's defaults. Returns the
        group's config after the change."""
        config = pb.GroupConfig()
        paths = list(reset)
        if weight is not None:
            config.weight = weight
            paths.append("weight")
        if max_active is not None:
            config.max_active = max_active
            paths.append("max_active")
        if rate_limit is not None:
            config.rate_limit.CopyFrom(rate_limit)
            paths.append("rate_limit")
        if not paths:
            raise ValueError("nothing to change: give weight, max_active, rate_limit or reset")
        req = pb.UpdateGroupConfigRequest(
            queue=queue, group_key=group_key, config=config, update_mask=field_mask_pb2.FieldMask(paths=paths)
        )
        resp = await retry_unavailable(
            lambda: self._stub.UpdateGroupConfig(req, timeout=self._timeout), self._tries
        )
        return resp.config

    async def pause(self, queue: str, group_key: str, duration: Delay | None = None) -> datetime:
        """Stops leasing the group's jobs on every replica for ``duration`` (seconds or a
        timedelta; ``None``: until :meth:`resume`); enqueues are still accepted and the other
        groups go on. Returns until when it is paused."""
        req = pb.PauseGroupRequest(queue=queue, group_key=group_key)
        if duration is not None:
            req.duration.CopyFrom(to_duration(duration))
        resp = await retry_unavailable(lambda: self._stub.PauseGroup(req, timeout=self._timeout), self._tries)
        return resp.paused_until.ToDatetime(tzinfo=timezone.utc)

    async def resume(self, queue: str, group_key: str) -> None:
        """Leases the group's jobs again (paused by :meth:`pause` or by a worker's
        ``RateLimited(..., pause_group=True)``)."""
        req = pb.ResumeGroupRequest(queue=queue, group_key=group_key)
        await retry_unavailable(lambda: self._stub.ResumeGroup(req, timeout=self._timeout), self._tries)
