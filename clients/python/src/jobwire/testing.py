"""Test helpers: run a handler on a fake lease (no server), and a real jobwire on free ports.

* :func:`run_handler` runs a handler exactly as the :class:`jobwire.Worker` does (async on the
  loop, sync in a thread) on a lease built from the arguments, and returns the :class:`Outcome`:
  acked, or the Fail it would send (disposition, error type, message, retry_after).
* :class:`JobwireServer` starts ``jobwire serve`` (``$JOBWIRE_BIN``, else ``jobwire`` on PATH)
  on free loopback ports with its embedded Redis (or ``redis_url``), waits until it is ready
  (the gRPC health check; ``/readyz`` on the HTTP port for a TLS server), and stops it
  (SIGTERM) on exit; :meth:`JobwireServer.kill` and :meth:`JobwireServer.start` restart it on
  the same ports. For pytest, :mod:`jobwire.pytest_plugin` has it as the ``jobwire_server``
  fixture.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from types import TracebackType
from typing import Any

import grpc
from grpc_health.v1 import health_pb2

from jobwire import pb
from jobwire._execute import Handler, execute
from jobwire._spec import encode_payload
from jobwire.context import JobContext
from jobwire.errors import cancelled_fail


@dataclass(frozen=True)
class Outcome:
    """What the worker would send for one attempt: an ack, or this Fail."""

    fail: pb.FailRequest | None
    result: bytes | None = None
    """The result the Ack would carry (returned bytes / str, or ``ctx.set_result``)."""
    reports: tuple[pb.ReportProgressRequest, ...] = ()
    """The progress reports and checkpoints the handler made, in order."""

    @property
    def checkpoint(self) -> bytes | None:
        """The last checkpoint the handler saved (None: it saved none)."""
        saved = [r.checkpoint for r in self.reports if r.HasField("checkpoint")]
        return saved[-1] if saved else None

    @property
    def acked(self) -> bool:
        return self.fail is None

    @property
    def disposition(self) -> str:
        """``"ACK"``, or the fail disposition without its prefix: RETRY, NO_RETRY, RATE_LIMITED."""
        if self.fail is None:
            return "ACK"
        return pb.FailDisposition.Name(self.fail.disposition).removeprefix("FAIL_DISPOSITION_")

    @property
    def retry_after(self) -> timedelta | None:
        if self.fail is None or not self.fail.HasField("retry_after"):
            return None
        return self.fail.retry_after.ToTimedelta()


def fake_lease(
    name: str,
    payload: Any = b"",
    *,
    queue: str = "test",
    job_id: str = "job-1",
    attempt: int = 1,
    idempotency_key: str | None = None,
    metadata: Mapping[str, str] | None = None,
    content_type: str | None = None,
    checkpoint: bytes = b"",
    group_key: str = "",
) -> pb.Lease:
    """A Lease as the server would send it (payload encoded as :meth:`jobwire.Client.enqueue` does)."""
    data, ctype = encode_payload(payload, content_type)
    job = pb.Job(
        queue=queue,
        job_id=job_id,
        name=name,
        payload=data,
        content_type=ctype,
        metadata=dict(metadata or {}),
        state=pb.JOB_STATE_ACTIVE,
        attempts_made=attempt,
        idempotency_key=idempotency_key or f"{queue}:{job_id}",
        checkpoint=checkpoint,
        group_key=group_key,
    )
    return pb.Lease(
        job=job,
        attempt=attempt,
        lease_token="fake-token",
        idempotency_key=idempotency_key or f"{queue}:{job_id}",
    )


async def run_handler(
    handler: Handler,
    name: str = "job",
    payload: Any = b"",
    *,
    cancel_after: float | None = None,
    cancel_reason: str = "",
    **lease: Any,
) -> Outcome:
    """Runs ``handler`` on :func:`fake_lease(name, payload, **lease) <fake_lease>` the way the
    worker does and returns the outcome (with the result and the progress reports it made: they
    are recorded, not sent). Sync handlers run in a one-thread pool. ``checkpoint=b"..."``
    gives the handler a previous attempt's checkpoint. ``cancel_after`` (seconds): the job is
    cancelled then, as a CancelJob would (``ctx.cancelled`` set, an async handler's task
    cancelled): a handler that lets the ``asyncio.CancelledError`` out ends as a Fail with
    error type ``cancelled``, one that returns anyway as a success (the worker acks it)."""
    from concurrent.futures import ThreadPoolExecutor

    ctx = JobContext(lease=fake_lease(name, payload, **lease), worker_id="test-worker")
    with ThreadPoolExecutor(1) as executor:
        task = asyncio.ensure_future(execute(handler, ctx, executor))
        timer = None
        if cancel_after is not None:

            def cancel() -> None:
                ctx.cancel_job(cancel_reason, None)
                if inspect.iscoroutinefunction(handler):
                    task.cancel()

            timer = asyncio.get_running_loop().call_later(cancel_after, cancel)
        stopped = False
        try:
            fail = await task
        except asyncio.CancelledError:
            if not task.cancelled() or ctx.cancel_reason is None:
                raise
            stopped, fail = True, None
        finally:
            if timer is not None:
                timer.cancel()
    if stopped:
        fail = cancelled_fail(ctx.cancel_reason or "")
        fail.queue, fail.job_id, fail.lease_token = ctx.queue, ctx.job_id, ctx.lease_token
    return Outcome(fail, ctx.result if fail is None else None, tuple(ctx.reports))


def run_handler_sync(handler: Handler, name: str = "job", payload: Any = b"", **lease: Any) -> Outcome:
    """:func:`run_handler` for code without an event loop."""
    return asyncio.run(run_handler(handler, name, payload, **lease))


# === a real server ===


def free_port() -> int:
    """A loopback TCP port free right now (never Redis's 6379)."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port != 6379:
            return port


def jobwire_binary() -> str:
    """``$JOBWIRE_BIN``, else ``jobwire`` on PATH; raises FileNotFoundError."""
    found = os.environ.get("JOBWIRE_BIN") or shutil.which("jobwire")
    if not found or not Path(found).is_file():
        raise FileNotFoundError("jobwire binary not found: set JOBWIRE_BIN or put jobwire on PATH")
    return found


class RedisServer:
    """A private ``redis-server`` on a free loopback port, without persistence (``--save ""
    --appendonly no``), for tests that kill and restart jobwire on the same Redis (the embedded
    Redis of a SIGKILLed server outlives it and keeps its data dir)."""

    def __init__(self, workdir: str | os.PathLike[str]) -> None:
        self.workdir = Path(workdir)
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    def start(self, timeout: float = 15.0) -> None:
        exe = shutil.which("redis-server")
        if exe is None:
            raise FileNotFoundError("redis-server not found on PATH (apt-get install redis-server)")
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            [
                exe,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.workdir),
                "--logfile",
                str(self.workdir / "redis.log"),
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + timeout
        while not self.ping():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"redis-server on port {self.port} did not start")
            time.sleep(0.02)

    def ping(self) -> bool:
        return self.command("PING") == b"+PONG"

    def command(self, *args: str) -> bytes:
        """One command in RESP; returns the first line of the reply (b"" if Redis is not there)."""
        req = f"*{len(args)}\r\n" + "".join(f"${len(a.encode())}\r\n{a}\r\n" for a in args)
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=2) as s:
                s.sendall(req.encode())
                return s.recv(4096).split(b"\r\n")[0]
        except OSError:
            return b""

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()

    def __enter__(self) -> RedisServer:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


class JobwireServer:
    """``jobwire serve`` on free loopback ports, for tests (see the module doc).

    ``args``: extra ``serve`` flags (``["--lease-duration", "1s"]``). ``redis_url``: an external
    Redis (the server's embedded one otherwise, in ``workdir``). The log goes to
    ``workdir/jobwire.log``.
    """

    def __init__(
        self,
        workdir: str | os.PathLike[str],
        args: Sequence[str] = (),
        *,
        redis_url: str | None = None,
        start_timeout: float = 30.0,
    ) -> None:
        self.workdir = Path(workdir)
        self.args = list(args)
        self.redis_url = redis_url
        self.start_timeout = start_timeout
        self.grpc_port = free_port()
        self.http_port = free_port()
        self.log_path = self.workdir / "jobwire.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def target(self) -> str:
        """``127.0.0.1:<grpc port>``."""
        return f"127.0.0.1:{self.grpc_port}"

    def start(self) -> None:
        """Starts the server (again, on the same ports) and waits until it is SERVING."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        store = (
            ["--redis-url", self.redis_url] if self.redis_url else ["--data-dir", str(self.workdir / "data")]
        )
        env = {k: v for k, v in os.environ.items() if not k.startswith("JOBWIRE_")}
        env.setdefault("RUST_LOG", "info")
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [
                    jobwire_binary(),
                    "serve",
                    "--grpc-addr",
                    self.target,
                    "--http-addr",
                    f"127.0.0.1:{self.http_port}",
                    *store,
                    *self.args,
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
            )
        try:
            self._wait_serving()
        except BaseException:
            self.stop()
            raise

    def _wait_serving(self) -> None:
        if "--tls-cert" in self.args:
            self._wait_readyz()  # the gRPC port speaks TLS (and may want a client certificate)
            return
        deadline = time.monotonic() + self.start_timeout
        last = "no answer"
        with grpc.insecure_channel(self.target) as channel:
            check = channel.unary_unary(
                "/grpc.health.v1.Health/Check",
                request_serializer=health_pb2.HealthCheckRequest.SerializeToString,
                response_deserializer=health_pb2.HealthCheckResponse.FromString,
            )
            while True:
                assert self.proc is not None
                if self.proc.poll() is not None:
                    raise RuntimeError(f"jobwire exited with {self.proc.returncode}:\n{self.tail()}")
                try:
                    if (
                        check(health_pb2.HealthCheckRequest(), timeout=1).status
                        == health_pb2.HealthCheckResponse.SERVING
                    ):
                        return
                except grpc.RpcError as e:
                    last = str(e.code())
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"jobwire not SERVING in {self.start_timeout} s ({last}):\n{self.tail()}"
                    )
                time.sleep(0.05)

    def _wait_readyz(self) -> None:
        deadline = time.monotonic() + self.start_timeout
        url = f"http://127.0.0.1:{self.http_port}/readyz"
        last = "no answer"
        while True:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"jobwire exited with {self.proc.returncode}:\n{self.tail()}")
            try:
                with urllib.request.urlopen(url, timeout=1) as resp:
                    if resp.status == 200:
                        return
            except OSError as e:
                last = str(e)
            if time.monotonic() > deadline:
                raise TimeoutError(f"jobwire not ready in {self.start_timeout} s ({last}):\n{self.tail()}")
            time.sleep(0.05)

    def kill(self) -> None:
        """SIGKILL: the server dies at once, as in a crash (its streams break)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def stop(self, grace: float = 10.0) -> None:
        """SIGTERM, then SIGKILL after ``grace`` seconds."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(grace)
        except subprocess.TimeoutExpired:
            self.kill()

    def tail(self, lines: int = 40) -> str:
        """The last lines of the server's log."""
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def __enter__(self) -> JobwireServer:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
