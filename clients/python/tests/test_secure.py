"""The client over TLS with bearer tokens and with a client certificate (mTLS), against a
server with --tls-cert/--tls-key and an auth file: each principal gets what its role allows,
the server's refusals surface as the documented errors."""

from __future__ import annotations

import asyncio
import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import grpc.aio
import pytest

import jobwire
from jobwire import pb
from jobwire.testing import JobwireServer, jobwire_binary

from .conftest import REPO_ROOT, Running, eventually

CLIENT_NAME = "sdk-client"


@dataclass
class Pki:
    dir: Path
    tokens: dict[str, str]

    @property
    def ca(self) -> Path:
        return self.dir / "ca.crt"


def new_token(name: str) -> tuple[str, str]:
    out = subprocess.run(
        [jobwire_binary(), "token", "new", "--id", name], check=True, capture_output=True, text=True
    ).stdout
    [digest] = re.findall(r"sha256\W+([0-9a-f]{64})", out)
    return out.splitlines()[0].strip(), digest


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    d = tmp_path_factory.mktemp("pki")
    subprocess.run(
        ["bash", str(REPO_ROOT / "scripts/dev-certs.sh"), str(d), CLIENT_NAME],
        check=True,
        capture_output=True,
    )
    grants = {"producer": "[producer]", "worker": "[worker]"}
    lines, tokens = ["principals:"], {}
    for name, roles in grants.items():
        tokens[name], digest = new_token(name)
        lines += [
            f"  - name: {name}",
            f"    tokens: [{{id: {name}, sha256: '{digest}'}}]",
            f"    grants: [{{queues: ['sdk-*'], roles: {roles}}}]",
        ]
    lines += [
        f"  - name: {CLIENT_NAME}",
        f"    certs: ['spiffe://jobwire.test/{CLIENT_NAME}']",
        "    grants: [{queues: ['sdk-*'], roles: [producer]}]",
    ]
    (d / "auth.yaml").write_text("\n".join(lines) + "\n")
    return Pki(d, tokens)


def tls_args(pki: Pki, mtls: bool = False) -> list[str]:
    args = [
        "--tls-cert",
        str(pki.dir / "server.crt"),
        "--tls-key",
        str(pki.dir / "server.key"),
        "--auth-file",
        str(pki.dir / "auth.yaml"),
    ]
    return args + (["--tls-client-ca", str(pki.ca)] if mtls else [])


@pytest.fixture
def tls_server(tmp_path: Path, pki: Pki) -> Iterator[JobwireServer]:
    with JobwireServer(tmp_path / "s", tls_args(pki)) as s:
        yield s


async def test_tokens_over_tls(tls_server: JobwireServer, pki: Pki) -> None:
    target = f"localhost:{tls_server.grpc_port}"
    tls = jobwire.TLS(ca=pki.ca.read_bytes())  # PEM bytes work as well as a path
    async with (
        jobwire.Client(target, token=pki.tokens["producer"], tls=tls) as producer,
        jobwire.Client(target, token=pki.tokens["worker"], tls=jobwire.TLS(ca=pki.ca)) as worker_client,
    ):
        await producer.wait_ready()
        assert (await producer.enqueue("sdk-orders", "ship", {"n": 1}, job_id="o1")).created
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await worker_client.enqueue("sdk-orders", "ship", b"", job_id="o2")
        assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
        worker = jobwire.Worker(worker_client, ["sdk-orders"], handle_signals=False)
        seen: list[str] = []

        @worker.handler("ship")
        async def ship(ctx: jobwire.JobContext) -> None:
            seen.append(ctx.job_id)

        run = Running(worker)

        async def done() -> bool:
            return (await producer.get_job("sdk-orders", "o1")).state == pb.JOB_STATE_COMPLETED

        await eventually(done, 15, "o1 acked over TLS")
        await run.stop()
        assert seen == ["o1"]
        refused = jobwire.Worker(producer, ["sdk-orders"], handle_signals=False)  # no worker role
        with pytest.raises(jobwire.SubscribeRefused) as refusal:
            await asyncio.wait_for(refused.run(), 10)
        assert refusal.value.code == grpc.StatusCode.PERMISSION_DENIED
    async with jobwire.Client(target, tls=tls) as anonymous:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await anonymous.get_job("sdk-orders", "o1")
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED


async def test_client_certificate_is_the_principal(tmp_path: Path, pki: Pki) -> None:
    with JobwireServer(tmp_path / "s", tls_args(pki, mtls=True)) as server:
        target = f"localhost:{server.grpc_port}"
        tls = jobwire.TLS(ca=pki.ca, cert=pki.dir / "client.crt", key=pki.dir / "client.key")
        async with jobwire.Client(target, tls=tls) as client:
            assert (await client.enqueue("sdk-mtls", "n", b"", job_id="m1")).created
        async with jobwire.Client(
            target, tls=jobwire.TLS(ca=pki.ca), token=pki.tokens["producer"]
        ) as no_cert:
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await no_cert.enqueue("sdk-mtls", "n", b"", job_id="m2")
            assert err.value.code() == grpc.StatusCode.UNAVAILABLE  # the TLS handshake fails


def test_a_client_certificate_needs_its_key() -> None:
    with pytest.raises(ValueError):
        jobwire.TLS(ca=b"", cert=b"cert")
