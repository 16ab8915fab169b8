"""A small Python client helper for jobwire.

Two things live here:

* ``load_stubs()`` compiles the repository's ``proto/jobwire/v1/*.proto`` with ``grpc_tools.protoc``
  at run time (into ``examples/python/gen/``, which git ignores), puts that folder on ``sys.path``
  and imports the generated modules. The result gives access to every module
  (``pb.job_pb2``, ``pb.worker_service_pb2_grpc``, ...) and, as a shortcut, to every message, enum
  and stub by its name (``pb.JobSpec``, ``pb.JobState``, ``pb.JobServiceStub``).
* ``Worker`` runs one ``WorkerService.Subscribe`` stream in background threads: requests go out
  through a queue, leases and settle results come back through queues (or a handler callback).

* ``connect()`` opens a channel: plaintext, or TLS with your CA (``ca=``), a client certificate
  for mTLS (``cert=``, ``key=``) and a bearer token (``token=``, sent as ``authorization:
  Bearer <token>`` on every call) for a server with ``--auth-file``.

Only grpcio, grpcio-tools and protobuf are needed (see requirements.txt)::

    import grpc
    from jobwire_client import Worker, load_stubs, ms

    pb = load_stubs()
    channel = grpc.insecure_channel("127.0.0.1:50051")
    jobs = pb.JobServiceStub(channel)
    jobs.Enqueue(pb.EnqueueRequest(job=pb.JobSpec(queue="emails", name="send", payload=b"hi")))

    def handle(worker, lease):
        print("got", lease.job.job_id, "attempt", lease.attempt)
        worker.ack(lease)

    with Worker(channel, ["emails"], credits=4, handler=handle) as worker:
        ...
"""

from __future__ import annotations

import hashlib
import importlib
import os
import queue
import shutil
import sys
import tempfile
import threading
import time
import traceback
from datetime import timedelta
from pathlib import Path
from types import ModuleType
from typing import Callable, Iterable, Iterator, Optional

try:  # POSIX only; without it concurrent first runs may race, which is harmless on one process
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None  # type: ignore[assignment]

import grpc

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parent.parent
DEFAULT_PROTO_ROOT = REPO_ROOT / "proto"
DEFAULT_OUT_DIR = HERE / "gen"
PROTO_PACKAGE_DIR = Path("jobwire") / "v1"


# === stubs ===


class Stubs:
    """The generated modules, plus every top-level message, enum and stub by name."""

    def __init__(self, modules: dict[str, ModuleType]):
        self.modules = modules
        self._names: dict[str, object] = {}
        for module in modules.values():
            for name in dir(module):
                # Messages, enums, enum values, stubs and servicers all start with a capital.
                if name[:1].isupper() and name != "DESCRIPTOR":
                    self._names.setdefault(name, getattr(module, name))

    def __getattr__(self, name: str):
        modules = self.__dict__.get("modules", {})
        if name in modules:
            return modules[name]
        names = self.__dict__.get("_names", {})
        if name in names:
            return names[name]
        raise AttributeError(f"no generated module or symbol named {name!r}")

    def __dir__(self) -> Iterable[str]:
        return sorted(set(self.modules) | set(self._names))


_stubs: Optional[Stubs] = None
_stubs_lock = threading.Lock()


def _digest(proto_root: Path, protos: list[Path]) -> str:
    """Changes when a proto file or the grpcio-tools version changes."""
    import grpc_tools

    h = hashlib.sha256()
    h.update(getattr(grpc_tools, "__version__", "").encode())
    try:
        from importlib.metadata import version

        h.update(version("grpcio-tools").encode())
    except Exception:  # pragma: no cover - metadata missing in odd installs
        pass
    for path in protos:
        h.update(str(path.relative_to(proto_root)).encode() + b"\0")
        h.update(path.read_bytes() + b"\0")
    return h.hexdigest()


def _protoc(proto_root: Path, protos: list[Path], out: Path) -> None:
    from grpc_tools import protoc

    well_known = Path(protoc.__file__).resolve().parent / "_proto"
    args = [
        "grpc_tools.protoc",
        f"-I{proto_root}",
        f"-I{well_known}",
        f"--python_out={out}",
        f"--pyi_out={out}",
        f"--grpc_python_out={out}",
        *[str(p.relative_to(proto_root)) for p in protos],
    ]
    code = protoc.main(args)
    if code != 0:
        raise RuntimeError(f"grpc_tools.protoc failed with exit code {code}: {' '.join(args)}")


def load_stubs(proto_root: os.PathLike | str | None = None, out_dir: os.PathLike | str | None = None) -> Stubs:
    """Generates (when the protos changed) and imports the jobwire.v1 Python stubs.

    ``proto_root`` defaults to the repository's ``proto/`` (or ``$JOBWIRE_PROTO_ROOT``),
    ``out_dir`` to ``examples/python/gen/``. The generated modules import each other as
    ``jobwire.v1.job_pb2``, so ``out_dir`` is put first on ``sys.path``. Safe to call from several
    threads and processes at once; later calls return the same object.
    """
    global _stubs
    with _stubs_lock:
        if _stubs is not None:
            return _stubs
        root = Path(proto_root or os.environ.get("JOBWIRE_PROTO_ROOT") or DEFAULT_PROTO_ROOT).resolve()
        out = Path(out_dir or DEFAULT_OUT_DIR).resolve()
        protos = sorted((root / PROTO_PACKAGE_DIR).glob("*.proto"))
        if not protos:
            raise FileNotFoundError(f"no .proto files under {root / PROTO_PACKAGE_DIR}")
        digest = _digest(root, protos)
        out.mkdir(parents=True, exist_ok=True)
        with open(out / ".lock", "w") as lock:
            if fcntl is not None:
                fcntl.flock(lock, fcntl.LOCK_EX)
            stamp = out / ".stamp"
            if not stamp.exists() or stamp.read_text() != digest or not (out / PROTO_PACKAGE_DIR).is_dir():
                build = Path(tempfile.mkdtemp(prefix=".build-", dir=out))
                try:
                    _protoc(root, protos, build)
                    shutil.rmtree(out / "jobwire", ignore_errors=True)
                    (build / "jobwire").rename(out / "jobwire")
                    stamp.write_text(digest)
                finally:
                    shutil.rmtree(build, ignore_errors=True)
        if str(out) not in sys.path:
            sys.path.insert(0, str(out))
        importlib.invalidate_caches()
        modules: dict[str, ModuleType] = {}
        for proto in protos:
            for suffix in ("_pb2", "_pb2_grpc"):
                name = proto.stem + suffix
                if (out / PROTO_PACKAGE_DIR / f"{name}.py").exists():
                    modules[name] = importlib.import_module(f"jobwire.v1.{name}")
        _stubs = Stubs(modules)
        return _stubs


# === small helpers ===


def ms(milliseconds: float):
    """A google.protobuf.Duration of that many milliseconds."""
    from google.protobuf import duration_pb2

    d = duration_pb2.Duration()
    d.FromTimedelta(timedelta(milliseconds=milliseconds))
    return d


def state_name(state: int) -> str:
    """JOB_STATE_COMPLETED -> "COMPLETED" (works for unknown numbers too)."""
    pb = load_stubs()
    try:
        return pb.JobState.Name(state).removeprefix("JOB_STATE_")
    except ValueError:
        return str(state)


def wait_for_serving(channel: grpc.Channel, timeout: float = 30.0, service: str = "") -> None:
    """Blocks until grpc.health.v1 says SERVING for ``service``; raises TimeoutError otherwise."""
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    stub = health_pb2_grpc.HealthStub(channel)
    deadline = time.monotonic() + timeout
    last = "no answer"
    while True:
        try:
            resp = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=2)
            if resp.status == health_pb2.HealthCheckResponse.SERVING:
                return
            last = health_pb2.HealthCheckResponse.ServingStatus.Name(resp.status)
        except grpc.RpcError as e:
            last = f"{e.code().name}: {e.details()}"
        if time.monotonic() >= deadline:
            raise TimeoutError(f"health of {service!r} not SERVING after {timeout} s (last: {last})")
        time.sleep(0.1)


# === channels ===


def read_secret(path: os.PathLike | str) -> str:
    """The content of a token or key file, without surrounding whitespace."""
    return Path(path).read_text().strip()


def connect(
    server: str,
    *,
    ca: os.PathLike | str | None = None,
    cert: os.PathLike | str | None = None,
    key: os.PathLike | str | None = None,
    token: str | None = None,
    server_name: str | None = None,
) -> grpc.Channel:
    """A channel to jobwire at ``server`` (HOST:PORT).

    * No ``ca``: plaintext, as ``grpc.insecure_channel``. With a ``token`` too, gRPC's local
      credentials carry it: gRPC sends call credentials in clear text only to a loopback
      address, so a token cannot leak onto a network this way.
    * ``ca``: TLS, trusting the CA certificates in that PEM file (the server's certificate must
      name the host you dial, or ``server_name``); ``cert`` and ``key`` add a client certificate
      (mTLS, a server with ``--tls-client-ca``).
    * ``token``: ``authorization: Bearer <token>`` on every call, as gRPC's access-token call
      credentials (``jw_<id>_<secret>``, from ``jobwire token new``).
    """
    call_creds = grpc.access_token_call_credentials(token) if token else None
    options = [("grpc.ssl_target_name_override", server_name)] if server_name else []
    if ca is None:
        if cert or key:
            raise ValueError("a client certificate needs TLS: give ca= too")
        if call_creds is None:
            return grpc.insecure_channel(server, options=options)
        local = grpc.local_channel_credentials(grpc.LocalConnectionType.LOCAL_TCP)
        return grpc.secure_channel(server, grpc.composite_channel_credentials(local, call_creds), options=options)
    if bool(cert) != bool(key):
        raise ValueError("a client certificate needs both cert= and key=")
    tls = grpc.ssl_channel_credentials(
        root_certificates=Path(ca).read_bytes(),
        private_key=Path(key).read_bytes() if key else None,
        certificate_chain=Path(cert).read_bytes() if cert else None,
    )
    creds = grpc.composite_channel_credentials(tls, call_creds) if call_creds else tls
    return grpc.secure_channel(server, creds, options=options)


# === worker ===

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
        stubs: Optional[Stubs] = None,
    ):
        self.pb = stubs or load_stubs()
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
