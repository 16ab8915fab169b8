"""The README's snippets are the files in clients/python/examples, verbatim, and they run
against a real server: the producer enqueues, the workers take the job and exit 0 on SIGTERM;
and the sign-up demo (examples/python/signup_demo.py, on this SDK) prints the expected table."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import pytest

import jobwire
from jobwire import pb
from jobwire.testing import JobwireServer

from .conftest import REPO_ROOT, eventually

SDK = Path(__file__).resolve().parents[1]
EXAMPLES = SDK / "examples"


@pytest.mark.parametrize("name", ["producer.py", "worker.py", "sync_worker.py", "job_control.py"])
def test_readme_shows_the_example_verbatim(name: str) -> None:
    readme = (SDK / "README.md").read_text()
    assert (EXAMPLES / name).read_text() in readme, f"README.md no longer shows examples/{name} as it is"


async def run_python(*args: str, target: str) -> asyncio.subprocess.Process:
    env = {**os.environ, "JOBWIRE_TARGET": target}
    return await asyncio.create_subprocess_exec(
        sys.executable, *args, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )


async def read_until(proc: asyncio.subprocess.Process, text: str, timeout: float = 15) -> str:
    assert proc.stdout is not None
    seen = ""
    while text not in seen:
        line = await asyncio.wait_for(proc.stdout.readline(), timeout)
        if not line:
            pytest.fail(f"ended before printing {text!r}:\n{seen}")
        seen += line.decode()
    return seen


async def stop(proc: asyncio.subprocess.Process) -> str:
    proc.send_signal(signal.SIGTERM)
    out, _ = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 0, out.decode()
    return out.decode()


async def test_job_control_example(server: JobwireServer, client: jobwire.Client) -> None:
    proc = await run_python(str(EXAMPLES / "job_control.py"), target=server.target)
    out, _ = await asyncio.wait_for(proc.communicate(), 30)
    text = out.decode()
    assert proc.returncode == 0, text
    assert "export:7 JOB_STATE_CANCELLED cancelled True" in text, text
    assert "cancelled 1 signalled 0" in text, text
    digest = await client.get_job("exports", "digest:7")
    assert digest.state == pb.JOB_STATE_CANCELLED and digest.HasField("expire_time")


async def test_producer_and_worker_examples(server: JobwireServer, client: jobwire.Client) -> None:
    producer = await run_python(str(EXAMPLES / "producer.py"), target=server.target)
    out, _ = await asyncio.wait_for(producer.communicate(), 30)
    assert producer.returncode == 0 and "enqueued welcome:ada created True" in out.decode(), out.decode()
    worker = await run_python(str(EXAMPLES / "worker.py"), target=server.target)
    await read_until(worker, "sending to ada@example.com attempt 1")

    async def acked() -> bool:
        return (await client.get_job("emails", "welcome:ada")).state == pb.JOB_STATE_COMPLETED

    await eventually(acked, 15, "the example job acked")
    await stop(worker)


async def test_sync_worker_example(server: JobwireServer, client: jobwire.Client) -> None:
    worker = await run_python(str(EXAMPLES / "sync_worker.py"), target=server.target)
    await read_until(worker, "rendering report 7")

    async def acked() -> bool:
        return (await client.get_job("reports", "report:7")).state == pb.JOB_STATE_COMPLETED

    await eventually(acked, 15, "the example job acked")
    await stop(worker)


async def test_signup_demo_prints_the_table(server: JobwireServer) -> None:
    demo = await run_python(
        str(REPO_ROOT / "examples/python/signup_demo.py"), "--server", server.target, target=server.target
    )
    out, _ = await asyncio.wait_for(demo.communicate(), 180)
    text = out.decode()
    assert demo.returncode == 0, text
    for line in (
        "| retry everything | 15 | 5 | 30 |",
        "| permanent errors not retried | 15 | 5 | 26 |",
        "| replay after recovery (not the 400s) | 18 | 2 | 29 |",
    ):
        assert line in text, text
