"""The README's worked multi-tenant example (examples/python/multi_tenant.py) against a real
server: without group keys the small tenant waits behind the big one's backlog; with them every
tenant starts within its weighted share of the turns and none runs past group_max_active. The
demo itself checks those bounds (exit 1 when one fails); this test runs it and checks the
rows that do not depend on timing."""

from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import EXAMPLES

ROOT = EXAMPLES.parents[1]


def test_multi_tenant_demo(jobwire_server):
    if jobwire_server.security is not None:
        pytest.skip("the demo speaks plaintext gRPC to a local server (no TLS or token options)")
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / "multi_tenant.py"), "--server", jobwire_server.grpc_addr],
        capture_output=True, text=True, timeout=180,
    )
    output = f"--- stdout ---\n{proc.stdout}\n--- stderr ---\n{proc.stderr}"
    assert proc.returncode == 0, output
    # FIFO: every job in enqueue order, whatever the timing.
    for row in ("| one FIFO queue | bigco | 1000 | - | 1000 |",
                "| one FIFO queue | smallco | 10 | - | 1010 |",
                "| one FIFO queue | vip | 60 | - | 1070 |",
                "| groups | bigco | 1000 | 1 | 1070 |"):
        assert row in proc.stdout, output
    readme = (ROOT / "README.md").read_text()
    assert "| one FIFO queue | smallco | 10 | - | 1010 |" in readme, "README.md no longer shows the demo's table"
