"""A blocking facade for simple scripts: :class:`Client` and :class:`Worker` without asyncio.

The sync :class:`Client` runs the asyncio :class:`jobwire.Client` on a private event loop in a
background thread, so both behave the same (retries, errors: ``grpc.aio.AioRpcError``, which is
a ``grpc.RpcError``). :class:`Worker` runs the asyncio worker with ``asyncio.run`` in the
calling thread (signal handling included when that is the main thread); its handlers may be
plain functions (run in its thread pool) or ``async def``. :func:`connect` gives a blocking
``grpc.Channel`` for the generated stubs in :mod:`jobwire.pb`.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine, Iterable, Mapping
from datetime import datetime
from types import TracebackType
from typing import Any, TypeVar

import grpc

from jobwire import client as aio_client
from jobwire import pb
from jobwire import worker as aio_worker
from jobwire._backoff import DEFAULT_TRIES
from jobwire._channel import DEFAULT_KEEPALIVE, TLS, Keepalive, sync_channel
from jobwire._execute import Handler
from jobwire._spec import Backoff
from jobwire.errors import Delay

T = TypeVar("T")
H = TypeVar("H", bound=Handler)


def connect(target: str, token: str | None = None, tls: TLS | None = None) -> grpc.Channel:
    """A blocking ``grpc.Channel`` to jobwire at ``target``, with the same credentials as
    :class:`jobwire.Client` (TLS, mTLS, the bearer token), for the generated stubs."""
    return sync_channel(target, token, tls)


class _Loop:
    """An event loop in a daemon thread; ``run(coro)`` blocks until the coroutine is done."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="jobwire-sync", daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        if not self.thread.is_alive():
            self.loop.close()


class _Blocking:
    """Runs the coroutine methods of an async object (the dead-letter and queue wrappers) to
    completion: ``client.dead_letters.list("q")`` blocks and returns the list."""

    def __init__(self, target: Any, loop: _Loop) -> None:
        self._target = target
        self._loop = loop

    def __getattr__(self, name: str) -> Callable[..., Any]:
        method = getattr(self._target, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            return self._loop.run(method(*args, **kwargs))

        return call


class Client:
    """The blocking twin of :class:`jobwire.Client` (same arguments, same methods)."""

    def __init__(
        self,
        target: str,
        token: str | None = None,
        tls: TLS | None = None,
        *,
        timeout: float = aio_client.DEFAULT_TIMEOUT,
        keepalive: float | Keepalive = DEFAULT_KEEPALIVE,
        unavailable_tries: int = DEFAULT_TRIES,
    ) -> None:
        self.target = target
        self.token = token
        self.tls = tls
        self.timeout = timeout
        self.keepalive = keepalive
        self.unavailable_tries = unavailable_tries
        self._loop = _Loop()
        self._client = aio_client.Client(
            target, token, tls, timeout=timeout, keepalive=keepalive, unavailable_tries=unavailable_tries
        )

    def close(self) -> None:
        """Closes the channel and stops the background loop."""
        self._loop.run(self._client.close())
        self._loop.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def wait_ready(self, timeout: float = 10.0) -> None:
        """Blocks until the server's health check says SERVING; raises TimeoutError."""
        self._loop.run(self._client.wait_ready(timeout))

    def enqueue(
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
        """See :meth:`jobwire.Client.enqueue`."""
        return self._loop.run(
            self._client.enqueue(
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
        )

    def enqueue_spec(self, spec: pb.JobSpec) -> pb.EnqueueResponse:
        """See :meth:`jobwire.Client.enqueue_spec`."""
        return self._loop.run(self._client.enqueue_spec(spec))

    def enqueue_batch(self, specs: Iterable[pb.JobSpec]) -> list[pb.EnqueueResult]:
        """See :meth:`jobwire.Client.enqueue_batch`."""
        return self._loop.run(self._client.enqueue_batch(list(specs)))

    def get_job(self, queue: str, job_id: str) -> pb.Job:
        """See :meth:`jobwire.Client.get_job`."""
        return self._loop.run(self._client.get_job(queue, job_id))

    def list_jobs(
        self,
        queue: str,
        state: pb.JobState.ValueType,
        *,
        page_size: int = 100,
        page_token: str = "",
        filter: pb.ListJobsFilter | None = None,
    ) -> pb.ListJobsResponse:
        """See :meth:`jobwire.Client.list_jobs` (one page)."""
        return self._loop.run(
            self._client.list_jobs(queue, state, page_size=page_size, page_token=page_token, filter=filter)
        )

    def list_workers(self, queue: str = "") -> pb.ListWorkersResponse:
        """See :meth:`jobwire.Client.list_workers`."""
        return self._loop.run(self._client.list_workers(queue))

    @property
    def dead_letters(self) -> Any:
        """:class:`jobwire.client.DeadLetters`, each method blocking (``list`` reads every page)."""
        return _Blocking(self._client.dead_letters, self._loop)

    @property
    def queues(self) -> Any:
        """:class:`jobwire.client.Queues`, each method blocking."""
        return _Blocking(self._client.queues, self._loop)

    @property
    def groups(self) -> Any:
        """:class:`jobwire.client.Groups`, each method blocking (``list`` reads every page)."""
        return _Blocking(self._client.groups, self._loop)

    def cancel_job(self, queue: str, job_id: str, reason: str = "") -> tuple[pb.Job, bool]:
        """See :meth:`jobwire.Client.cancel_job`."""
        return self._loop.run(self._client.cancel_job(queue, job_id, reason))

    def cancel_jobs(
        self,
        queue: str,
        *,
        name: str = "",
        group_key: str = "",
        metadata_key: str = "",
        metadata_value: str | None = None,
        reason: str = "",
        limit: int = 0,
    ) -> aio_client.CancelCount:
        """See :meth:`jobwire.Client.cancel_jobs` (every page)."""
        return self._loop.run(
            self._client.cancel_jobs(
                queue,
                name=name,
                group_key=group_key,
                metadata_key=metadata_key,
                metadata_value=metadata_value,
                reason=reason,
                limit=limit,
            )
        )

    def cancel_jobs_page(
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
        """See :meth:`jobwire.Client.cancel_jobs_page` (one call)."""
        return self._loop.run(
            self._client.cancel_jobs_page(
                queue,
                name=name,
                group_key=group_key,
                metadata_key=metadata_key,
                metadata_value=metadata_value,
                reason=reason,
                limit=limit,
                page_token=page_token,
            )
        )

    def delete_job(self, queue: str, job_id: str) -> pb.JobState.ValueType:
        """See :meth:`jobwire.Client.delete_job`."""
        return self._loop.run(self._client.delete_job(queue, job_id))


class Worker:
    """The blocking twin of :class:`jobwire.Worker`: register handlers, then :meth:`run` blocks
    until SIGTERM/SIGINT (or :meth:`stop` from another thread) and the graceful shutdown."""

    def __init__(
        self,
        client: Client,
        queues: Iterable[str],
        concurrency: int = 1,
        worker_id: str | None = None,
        **options: Any,
    ) -> None:
        self._client = aio_client.Client(
            client.target, client.token, client.tls, timeout=client.timeout, keepalive=client.keepalive
        )
        self._worker = aio_worker.Worker(self._client, queues, concurrency, worker_id, **options)
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def worker_id(self) -> str:
        return self._worker.worker_id

    def handler(self, name: str) -> Callable[[H], H]:
        """See :meth:`jobwire.Worker.handler`."""
        return self._worker.handler(name)

    def handle(self, name: str, fn: Handler) -> None:
        """See :meth:`jobwire.Worker.handle`."""
        self._worker.handle(name, fn)

    def run(self) -> None:
        """Blocks: leases and runs jobs until stopped, then shuts down gracefully."""

        async def main() -> None:
            self._loop = asyncio.get_running_loop()
            try:
                await self._worker.run()
            finally:
                await self._client.close()

        asyncio.run(main())

    def stop(self, *, now: bool = False) -> None:
        """Starts the graceful shutdown; safe from any thread (e.g. a handler or a timer)."""
        loop = self._loop
        if loop is None:
            self._worker.stop(now=now)
        else:
            loop.call_soon_threadsafe(lambda: self._worker.stop(now=now))
