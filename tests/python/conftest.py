"""Fixtures for driving a real jobwire server from Python, as a user in another language would.

The session starts its own ``redis-server`` on a free loopback port (never 6379, no persistence)
and the jobwire binary pointed at it, waits for grpc.health.v1 to say SERVING, and stops both at
the end. The binary is ``$JOBWIRE_BIN`` or ``<repo>/target/debug/jobwire`` (run ``cargo build``).

The session server comes twice (``jobwire_server`` is parametrized): ``plaintext``, and ``tls``:
TLS on the gRPC port (a throwaway CA from scripts/dev-certs.sh) with an auth file, every call
carrying the bearer token of a principal granted producer, worker and admin on every queue. So
every test that uses ``channel`` runs over both. ``security`` holds the certificates and the
tokens of the other principals (tests/python/test_secure.py).

The client side is the Python SDK (clients/python, package ``jobwire``): its generated messages
and stubs (``jobwire.pb``, the ``stubs`` fixture) and its channels (``jobwire.sync.connect``:
TLS, mTLS, bearer token); ``stream.py`` drives a raw Subscribe stream for the protocol tests.

Run: bash scripts/setup.sh && .venv/bin/pytest tests/python
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest

import jobwire
import jobwire.sync
from grpc_health.v1 import health_pb2, health_pb2_grpc

REPO_ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = REPO_ROOT / "examples" / "python"

START_TIMEOUT_S = float(os.environ.get("JOBWIRE_TEST_START_TIMEOUT", "30"))


def free_port() -> int:
    """A loopback port that is free right now (never Redis's 6379)."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port != 6379:
            return port


def connect(server: str, *, ca=None, cert=None, key=None, token: str | None = None) -> grpc.Channel:
    """A blocking channel from the SDK: plaintext without ``ca``, else TLS trusting ``ca``
    (a client certificate with ``cert`` and ``key``); ``token`` as the bearer token."""
    tls = jobwire.TLS(ca=ca, cert=cert, key=key) if ca is not None else None
    if tls is None and (cert or key):
        raise ValueError("a client certificate needs TLS: give ca= too")
    return jobwire.sync.connect(server, token=token, tls=tls)


def wait_for_serving(channel: grpc.Channel, timeout: float = 30.0, service: str = "") -> None:
    """Blocks until grpc.health.v1 says SERVING for ``service``; raises TimeoutError otherwise."""
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
    """The generated jobwire.v1 messages, enums and stubs (``jobwire.pb``)."""
    return jobwire.pb


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


# === TLS and tokens ===

# Principals of the session's auth file: name -> grants (queue patterns -> roles). Tokens are
# made by `jobwire token new`; `cert-client` is the identity of the client certificate.
PRINCIPALS = {
    # The whole suite's token: everything a test of the plaintext run does.
    "suite": [{"queues": ["*"], "roles": ["producer", "worker", "admin"]}],
    "orders-api": [{"queues": ["orders-*"], "roles": ["producer"]}],
    "orders-worker": [{"queues": ["orders-*"], "roles": ["worker"]}],
    "orders-viewer": [{"queues": ["orders-*"], "roles": ["viewer"]}],
    "billing-worker": [{"queues": ["billing-*"], "roles": ["worker", "producer"]}],
    "oncall": [{"queues": ["*"], "roles": ["admin"]}],
    # The sign-up demo's three principals (examples/python/signup_demo.py with tokens).
    "signup-api": [{"queues": ["signups-*"], "roles": ["producer"]}],
    "email-worker": [{"queues": ["signups-*"], "roles": ["worker"]}],
    "signup-oncall": [{"queues": ["signups-*"], "roles": ["admin"]}],
}
CERT_CLIENT = "cert-client"
CERT_IDENTITY = f"spiffe://jobwire.test/{CERT_CLIENT}"
CERT_GRANTS = [{"queues": ["orders-*"], "roles": ["producer"]}]


def new_token(token_id: str) -> tuple[str, str]:
    """(token, SHA-256 hex of its secret) from `jobwire token new --id ID`."""
    out = subprocess.run([str(jobwire_binary()), "token", "new", "--id", token_id],
                         check=True, capture_output=True, text=True).stdout
    token = out.splitlines()[0].strip()
    hashes = re.findall(r"sha256\W+([0-9a-f]{64})", out)
    assert token.startswith(f"jw_{token_id}_") and len(hashes) == 1, f"unexpected `token new` output:\n{out}"
    return token, hashes[0]


def auth_file_yaml(principals: list[dict]) -> str:
    """An auth file (YAML) from [{name, tokens: [(id, sha256)], certs: [...], grants: [...]}]."""
    lines = ["principals:"]
    for p in principals:
        lines.append(f"  - name: {p['name']!r}")
        if p.get("tokens"):
            lines.append("    tokens:")
            lines += [f"      - {{id: {i!r}, sha256: {h!r}}}" for i, h in p["tokens"]]
        if p.get("certs"):
            lines.append(f"    certs: {list(p['certs'])!r}")
        lines.append("    grants:")
        for g in p["grants"]:
            lines.append(f"      - {{queues: {g['queues']!r}, roles: {g['roles']!r}}}")
    return "\n".join(lines) + "\n"


@dataclass
class Security:
    """The files and tokens of a TLS + auth server: a CA, the server's certificate, a client
    certificate (identity CERT_IDENTITY), the auth file and one token per PRINCIPALS entry."""

    dir: Path
    tokens: dict[str, str] = field(default_factory=dict)
    hashes: dict[str, str] = field(default_factory=dict)

    @property
    def ca(self) -> Path:
        return self.dir / "ca.crt"

    @property
    def auth_file(self) -> Path:
        return self.dir / "auth.yaml"

    def server_args(self, mtls: bool = False) -> tuple[str, ...]:
        args = ("--tls-cert", str(self.dir / "server.crt"), "--tls-key", str(self.dir / "server.key"),
                "--auth-file", str(self.auth_file))
        return args + (("--tls-client-ca", str(self.ca)) if mtls else ())

    def principals(self, without: tuple[str, ...] = ()) -> list[dict]:
        out = [{"name": name, "tokens": [(name, self.hashes[name])], "grants": grants}
               for name, grants in PRINCIPALS.items() if name not in without]
        out.append({"name": CERT_CLIENT, "certs": [CERT_IDENTITY], "grants": CERT_GRANTS})
        return out

    def channel(self, addr: str, principal: str | None = None, client_cert: bool = False) -> grpc.Channel:
        """A TLS channel trusting the test CA, with `principal`'s token and/or the client certificate."""
        cert = (self.dir / "client.crt", self.dir / "client.key") if client_cert else (None, None)
        return connect(addr, ca=self.ca, cert=cert[0], key=cert[1],
                       token=self.tokens[principal] if principal else None)


def make_security(workdir: Path) -> Security:
    """Certificates (scripts/dev-certs.sh), a token per principal, and the auth file."""
    subprocess.run(["bash", str(REPO_ROOT / "scripts" / "dev-certs.sh"), str(workdir), CERT_CLIENT],
                   check=True, capture_output=True, text=True)
    sec = Security(workdir)
    for name in PRINCIPALS:
        sec.tokens[name], sec.hashes[name] = new_token(name)
    sec.auth_file.write_text(auth_file_yaml(sec.principals()))
    return sec


class JobwireProcess:
    """A jobwire child process on free loopback ports, SERVING once constructed. With
    `security`, TLS and the auth file are on (``security.server_args``; ``mtls`` requires
    client certificates too)."""

    def __init__(self, redis_url: str, workdir: Path, extra_args: tuple[str, ...] = (),
                 security: Security | None = None, mtls: bool = False):
        self.grpc_addr = f"127.0.0.1:{free_port()}"
        self.http_addr = f"127.0.0.1:{free_port()}"
        self.security = security
        self.mtls = mtls
        if security is not None:
            extra_args = security.server_args(mtls) + tuple(extra_args)
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

    def channel(self, principal: str | None = None) -> grpc.Channel:
        """A channel as a client of this server: plaintext, or TLS with `principal`'s token
        (and the client certificate when the server requires one)."""
        if self.security is None:
            return grpc.insecure_channel(self.grpc_addr)
        return self.security.channel(self.grpc_addr, principal, client_cert=self.mtls)

    def _wait_serving(self) -> None:
        channel = self.channel()
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
def security(tmp_path_factory) -> Security:
    """A throwaway CA and certificates, a token per principal, the auth file."""
    return make_security(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="session", params=["plaintext", "tls"])
def jobwire_server(request, redis_url, tmp_path_factory):
    """The jobwire binary on free ports, plaintext or with TLS and an auth file; yields the
    JobwireProcess (``grpc_addr``, ``security``, ``channel(principal)``)."""
    sec = request.getfixturevalue("security") if request.param == "tls" else None
    server = JobwireProcess(redis_url, tmp_path_factory.mktemp(f"jobwire-{request.param}"), security=sec)
    try:
        yield server
    finally:
        server.stop()
        if os.environ.get("JOBWIRE_TEST_SHOW_LOG"):
            print(f"\n--- jobwire log ({server.log}) ---\n{server.tail(200)}")


@pytest.fixture(scope="session")
def channel(jobwire_server):
    """A channel to the session's server; over TLS it carries the `suite` principal's token."""
    ch = jobwire_server.channel("suite")
    yield ch
    ch.close()


@pytest.fixture
def queue_name(request):
    """A queue name unique to this test and run: [A-Za-z0-9._-], at most 128 bytes."""
    base = "".join(c if c.isalnum() else "-" for c in request.node.name)[:60].strip("-")
    return f"py-{base}-{secrets.token_hex(4)}"
