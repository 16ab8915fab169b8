"""pytest fixtures for testing code that uses jobwire, against a real server.

Opt in from a ``conftest.py`` with ``pytest_plugins = ["jobwire.pytest_plugin"]`` (needs
pytest, and pytest-asyncio for ``jobwire_client``). The server is ``jobwire serve``
(``$JOBWIRE_BIN``, else ``jobwire`` on PATH) on free loopback ports with its embedded Redis,
one per test, stopped afterwards; mark a test ``@pytest.mark.jobwire_args("--lease-duration",
"1s")`` to pass it flags.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from jobwire.client import Client
from jobwire.testing import JobwireServer


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "jobwire_args(*flags): extra `jobwire serve` flags for jobwire_server")


@pytest.fixture
def jobwire_server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[JobwireServer]:
    """A fresh jobwire server for this test (``target``, ``kill()``, ``start()``, ``tail()``)."""
    marker = request.node.get_closest_marker("jobwire_args")
    args = [str(a) for a in marker.args] if marker else []
    with JobwireServer(tmp_path / "jobwire", args) as server:
        yield server


@pytest.fixture
async def jobwire_client(jobwire_server: JobwireServer) -> AsyncIterator[Client]:
    """A :class:`jobwire.Client` connected to ``jobwire_server``."""
    async with Client(jobwire_server.target) as client:
        yield client
