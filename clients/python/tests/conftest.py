"""Fixtures: a real ``jobwire serve`` per test (jobwire.testing.JobwireServer, on free ports,
the binary from $JOBWIRE_BIN or PATH), an asyncio Client on it, and a unique queue name."""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

import jobwire
from jobwire.testing import JobwireServer

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parents[2]


# The SDK's own pytest fixtures (jobwire_server, jobwire_client), as a user would take them.
pytest_plugins = ["jobwire.pytest_plugin"]


@pytest.fixture
def server(jobwire_server: JobwireServer) -> JobwireServer:
    """A fresh server with its embedded Redis (jobwire.pytest_plugin)."""
    return jobwire_server


@pytest.fixture
def client(jobwire_client: jobwire.Client) -> jobwire.Client:
    return jobwire_client


@pytest.fixture
def queue(request: pytest.FixtureRequest) -> str:
    """A queue name unique to the test: [A-Za-z0-9._-], at most 128 bytes."""
    base = "".join(c if c.isalnum() else "-" for c in request.node.name)[:60].strip("-")
    return f"py-{base}-{secrets.token_hex(3)}"


async def eventually(
    probe: Callable[[], Awaitable[bool]], timeout: float = 15.0, what: str = "condition"
) -> None:
    """Polls ``probe`` until it returns True; fails the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not await probe():
        if time.monotonic() > deadline:
            pytest.fail(f"{what} not reached within {timeout} s")
        await asyncio.sleep(0.02)


class Running:
    """A worker running in a task; ``stop()`` shuts it down gracefully and re-raises its error."""

    def __init__(self, worker: jobwire.Worker) -> None:
        self.worker = worker
        self.task = asyncio.create_task(worker.run())

    async def stop(self) -> None:
        self.worker.stop()
        await asyncio.wait_for(self.task, 30)


async def start(worker: jobwire.Worker) -> Running:
    return Running(worker)
