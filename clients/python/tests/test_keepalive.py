"""The channel's HTTP/2 keepalive (``Client(keepalive=...)``) against a real server through a
TCP proxy: a frozen path is noticed within interval + timeout, and a client that pings every
second is not cut off (the server has no ping rate limit)."""

from __future__ import annotations

import asyncio
import time

import grpc
import grpc.aio
import pytest

import jobwire
from jobwire import pb
from jobwire.testing import JobwireServer

from .proxy import Proxy


def test_keepalive_option_checks_its_bounds() -> None:
    assert jobwire.Keepalive() == jobwire.Keepalive(10.0, 5.0, True)
    assert jobwire.Keepalive.of(4.0) == jobwire.Keepalive(4.0, 2.0, True)
    with pytest.raises(ValueError):
        jobwire.Keepalive(interval=0.5)


async def frozen_call(server: JobwireServer, queue: str, keepalive: jobwire.Keepalive) -> float:
    """Seconds a GetJob sent into a frozen path took to fail UNAVAILABLE (deadline 60 s)."""
    proxy = Proxy("127.0.0.1", server.grpc_port)
    await proxy.start()
    try:
        async with jobwire.Client(proxy.address, keepalive=keepalive, timeout=60, unavailable_tries=1) as c:
            await c.enqueue(queue, "k", b"", job_id="k")
            assert proxy.freeze() == 1
            started = time.monotonic()
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await c.get_job(queue, "k")
            took = time.monotonic() - started
    finally:
        await proxy.close()
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE, err.value
    return took


async def test_a_frozen_server_fails_the_call_within_interval_plus_timeout(
    server: JobwireServer, queue: str
) -> None:
    # interval + timeout = 2 s, far below the call's 60 s deadline.
    took = await frozen_call(server, queue, jobwire.Keepalive(interval=1.0, timeout=1.0))
    assert took < 8, took


async def test_the_keepalive_timeout_reaches_the_channel(server: JobwireServer, queue: str) -> None:
    # gRPC core pings as the call goes out, so a call in flight learns of the frozen path
    # after the timeout: 12 s here (the default's 5 s would fail it much sooner).
    took = await frozen_call(server, queue, jobwire.Keepalive(interval=1.0, timeout=12.0))
    assert 10 <= took < 30, took


async def test_a_ping_heavy_client_is_not_cut_off(server: JobwireServer, queue: str) -> None:
    proxy = Proxy("127.0.0.1", server.grpc_port)
    await proxy.start()
    keepalive = jobwire.Keepalive(interval=1.0, timeout=1.0, without_calls=True)
    try:
        async with jobwire.Client(proxy.address, keepalive=keepalive) as c:
            await c.enqueue(queue, "k", b"", job_id="k")
            await asyncio.sleep(5)  # idle: a PING a second, no call open
            job = await c.get_job(queue, "k")
    finally:
        await proxy.close()
    assert job.state == pb.JOB_STATE_WAITING
    assert proxy.connections == 1, "the server closed the pinging connection"
