"""Fixtures for driving a real jobwire server from Python, as a user in another language would.

The session starts its own ``redis-server`` on a free loopback port (never 6379, no persistence)
and the jobwire binary pointed at it, waits for grpc.health.v1 to say SERVING, and stops both at
the end. The binary is ``$JOBWIRE_BIN`` or ``<repo>/target/debug/jobwire`` (run ``cargo build``).

Run: .venv/bin/pip install -r examples/python/requirements.txt && .venv/bin/pytest tests/python
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = REPO_ROOT / "examples" / "python"
sys.path.insert(0, str(EXAMPLES))

from jobwire_client import load_stubs, wait_for_serving  # noqa: E402

START_TIMEOUT_S = float(os.environ.get("JOBWIRE_TEST_START_TIMEOUT", "30"))


def free_port() -> int:
    """A loopback port that is free right now (never Redis's 6379)."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port != 6379:
            return port


def _tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _stop(proc: subprocess.Popen, grace: float) -> None:
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


def _redis_ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
            s.sendall(b"PING\r\n")
            return s.recv(64).startswith(b"+PONG")
    except OSError:
        return False


@pytest.fixture(scope="session")
def stubs():
    return load_stubs()


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory):
    """A private redis-server on a free port, without persistence."""
    exe = shutil.which("redis-server")
    if exe is None:
        pytest.fail("redis-server not found on PATH (apt-get install -y redis-server)")
    workdir = tmp_path_factory.mktemp("redis")
    port = free_port()
    log = workdir / "redis.log"
    proc = subprocess.Popen(
        [exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
         "--dir", str(workdir), "--logfile", str(log)],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not _redis_ping(port):
            if proc.poll() is not None:
                pytest.fail(f"redis-server exited with {proc.returncode}:\n{_tail(log)}")
            if time.monotonic() > deadline:
                pytest.fail(f"redis-server on port {port} did not answer PING within {START_TIMEOUT_S} s")
            time.sleep(0.05)
        yield f"redis://127.0.0.1:{port}"
    finally:
        _stop(proc, grace=5)


def jobwire_binary() -> Path:
    binary = Path(os.environ.get("JOBWIRE_BIN") or REPO_ROOT / "target" / "debug" / "jobwire")
    if not binary.is_file():
        pytest.fail(f"jobwire binary not found at {binary}: run `cargo build` or set JOBWIRE_BIN")
    return binary


class JobwireProcess:
    """A jobwire child process on free loopback ports, SERVING once constructed."""

    def __init__(self, redis_url: str, workdir: Path, extra_args: tuple[str, ...] = ()):
        self.grpc_addr = f"127.0.0.1:{free_port()}"
        self.http_addr = f"127.0.0.1:{free_port()}"
        self.log = workdir / "jobwire.log"
        env = {k: v for k, v in os.environ.items() if not k.startswith("JOBWIRE_")}
        env.setdefault("RUST_LOG", "info")
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                [str(jobwire_binary()), "serve",
                 "--redis-url", redis_url,
                 "--grpc-addr", self.grpc_addr,
                 "--http-addr", self.http_addr,
                 "--lease-duration", "2s",
                 "--reaper-interval", "100ms",
                 *extra_args],
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, cwd=workdir, env=env,
            )
        try:
            self._wait_serving()
        except BaseException:
            self.stop()
            raise

    def _wait_serving(self) -> None:
        channel = grpc.insecure_channel(self.grpc_addr)
        try:
            deadline = time.monotonic() + START_TIMEOUT_S
            while True:
                if self.proc.poll() is not None:
                    pytest.fail(f"jobwire exited with {self.proc.returncode} before SERVING:\n{self.tail()}")
                try:
                    wait_for_serving(channel, timeout=1.0)
                    return
                except TimeoutError as e:
                    if time.monotonic() > deadline:
                        pytest.fail(f"jobwire at {self.grpc_addr} not SERVING within {START_TIMEOUT_S} s "
                                    f"({e}):\n{self.tail()}")
        finally:
            channel.close()

    def tail(self, lines: int = 40) -> str:
        return _tail(self.log, lines)

    def stop(self, grace: float = 10.0) -> None:
        _stop(self.proc, grace)


@pytest.fixture(scope="session")
def jobwire_server(redis_url, tmp_path_factory):
    """The jobwire binary on free ports; yields its gRPC address HOST:PORT."""
    server = JobwireProcess(redis_url, tmp_path_factory.mktemp("jobwire"))
    try:
        yield server.grpc_addr
    finally:
        server.stop()
        if os.environ.get("JOBWIRE_TEST_SHOW_LOG"):
            print(f"\n--- jobwire log ({server.log}) ---\n{server.tail(200)}")


@pytest.fixture(scope="session")
def channel(jobwire_server):
    ch = grpc.insecure_channel(jobwire_server)
    yield ch
    ch.close()


@pytest.fixture
def queue_name(request):
    """A queue name unique to this test and run: [A-Za-z0-9._-], at most 128 bytes."""
    base = "".join(c if c.isalnum() else "-" for c in request.node.name)[:60].strip("-")
    return f"py-{base}-{secrets.token_hex(4)}"
