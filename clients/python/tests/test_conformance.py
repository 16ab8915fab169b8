"""Every scenario of clients/conformance/scenarios.json against a real jobwire server.

One test per scenario id (parametrized from the file), each on its own server started with the
scenario's ``server`` flags; ``test_every_scenario_has_a_test`` fails when the file names a
scenario this SDK does not implement.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import signal
import sys
import time
import urllib.request
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import pytest

import jobwire
from jobwire import pb
from jobwire.testing import JobwireServer, RedisServer

from .conftest import REPO_ROOT, Running, eventually
from .control_scenarios import CONTROL_SCENARIOS
from .proxy import Proxy

Scenario = dict[str, Any]
SCENARIOS: dict[str, Scenario] = {
    s["id"]: s
    for s in json.loads((REPO_ROOT / "clients/conformance/scenarios.json").read_text())["scenarios"]
}
IMPLEMENTED: dict[str, Callable[[Scenario, Path], Awaitable[None]]] = {}


def scenario(fn: Callable[[Scenario, Path], Awaitable[None]]) -> Callable[[Scenario, Path], Awaitable[None]]:
    IMPLEMENTED[fn.__name__] = fn
    return fn


def new_queue() -> str:
    return f"conf-{secrets.token_hex(4)}"


async def job_states(client: jobwire.Client, queue: str, ids: list[str]) -> list[pb.Job]:
    return [await client.get_job(queue, i) for i in ids]


async def wait_completed(
    client: jobwire.Client, queue: str, ids: list[str], timeout: float = 30
) -> list[pb.Job]:
    async def done() -> bool:
        return all(j.state == pb.JOB_STATE_COMPLETED for j in await job_states(client, queue, ids))

    await eventually(done, timeout, f"jobs {ids} COMPLETED")
    return await job_states(client, queue, ids)


# === the scenarios ===


@scenario
async def concurrency_never_exceeded(sc: Scenario, tmp: Path) -> None:
    p = sc["params"]
    q, ids = new_queue(), [f"j{i}" for i in range(p["jobs"])]
    with JobwireServer(tmp, sc["server"]) as server:
        async with jobwire.Client(server.target) as client:
            for i in ids:
                await client.enqueue(q, "work", b"", job_id=i)
            worker = jobwire.Worker(client, [q], concurrency=p["concurrency"], handle_signals=False)
            running, most, calls = 0, 0, Counter[str]()

            @worker.handler("work")
            async def work(ctx: jobwire.JobContext) -> None:
                nonlocal running, most
                running += 1
                most = max(most, running)
                calls[ctx.job_id] += 1
                await asyncio.sleep(p["handler_ms"] / 1000)
                running -= 1

            run = Running(worker)
            active: list[int] = []

            async def all_done() -> bool:
                stats = await client.queues.stats(q)
                active.append(stats.active)
                return stats.completed == len(ids)

            await eventually(all_done, 30, "every job completed")
            await run.stop()
            jobs = await job_states(client, q, ids)
    assert most == p["concurrency"]
    assert worker.stats.max_running == p["concurrency"]
    assert max(active) <= p["concurrency"], active
    assert calls == Counter(ids)
    assert all(j.state == pb.JOB_STATE_COMPLETED and j.attempts_made == 1 for j in jobs)


@scenario
async def long_handler_not_redelivered(sc: Scenario, tmp: Path) -> None:
    p = sc["params"]
    assert p["handler_ms"] >= 3 * p["lease_ms"]
    q = new_queue()
    with JobwireServer(tmp, sc["server"]) as server:
        async with jobwire.Client(server.target) as client:
            await client.enqueue(q, "long", b"", job_id="long", max_attempts=3)
            worker = jobwire.Worker(client, [q], handle_signals=False)
            calls: list[int] = []

            @worker.handler("long")
            async def long(ctx: jobwire.JobContext) -> None:
                calls.append(ctx.attempt)
                await asyncio.sleep(p["handler_ms"] / 1000)

            run = Running(worker)
            [job] = await wait_completed(client, q, ["long"])
            await run.stop()
    assert calls == [1]
    assert worker.stats.leases == 1
    # The heartbeats kept this stream (a silent one is ended past --heartbeat-timeout, and the
    # reconnect's ExtendLease would then be what saved the lease).
    assert worker.stats.reconnects == 0 and worker.stats.extended == 0
    assert job.attempts_made == 1 and not job.errors


@scenario
async def non_retryable_dead_letters(sc: Scenario, tmp: Path) -> None:
    p = sc["params"]
    q = new_queue()
    with JobwireServer(tmp, sc["server"]) as server:
        async with jobwire.Client(server.target) as client:
            await client.enqueue(q, "bad", b"", job_id="bad", max_attempts=p["max_attempts"])
            worker = jobwire.Worker(client, [q], handle_signals=False)

            @worker.handler("bad")
            async def bad(ctx: jobwire.JobContext) -> None:
                raise jobwire.NonRetryable(
                    "400 invalid address: a,b@example.com", error_type="invalid_address"
                )

            run = Running(worker)

            async def dead() -> bool:
                return (await client.get_job(q, "bad")).state == pb.JOB_STATE_DEAD

            await eventually(dead, 15, "the job DEAD")
            await run.stop()
            job = await client.get_job(q, "bad")
            listed = await client.dead_letters.list(q)
    assert job.attempts_made == 1 and job.max_attempts == p["max_attempts"]
    assert job.dead_reason == pb.DEAD_REASON_NO_RETRY
    assert job.errors[-1].message == "400 invalid address: a,b@example.com"
    assert job.errors[-1].error_type == "invalid_address"
    assert [j.job_id for j in listed] == ["bad"]


@scenario
async def retry_after_honoured(sc: Scenario, tmp: Path) -> None:
    p = sc["params"]
    q = new_queue()
    with JobwireServer(tmp, sc["server"]) as server:
        async with jobwire.Client(server.target) as client:
            await client.enqueue(q, "later", b"", job_id="later", max_attempts=3)
            worker = jobwire.Worker(client, [q], handle_signals=False)
            seen: list[tuple[int, float]] = []

            @worker.handler("later")
            async def later(ctx: jobwire.JobContext) -> None:
                seen.append((ctx.attempt, time.monotonic()))
                if ctx.attempt == 1:
                    raise jobwire.RetryAfter(p["retry_after_ms"] / 1000)

            run = Running(worker)
            [job] = await wait_completed(client, q, ["later"])
            await run.stop()
    assert [a for a, _ in seen] == [1, 2]
    waited_ms = (seen[1][1] - seen[0][1]) * 1000
    assert waited_ms >= p["retry_after_ms"] - p["slack_ms"], waited_ms
    assert job.attempts_made == 2


@scenario
async def rate_limited_uses_no_attempt(sc: Scenario, tmp: Path) -> None:
    p = sc["params"]
    q = new_queue()
    with JobwireServer(tmp, sc["server"]) as server:
        async with jobwire.Client(server.target) as client:
            await client.enqueue(q, "limited", b"", job_id="limited", max_attempts=p["max_attempts"])
            worker = jobwire.Worker(client, [q], handle_signals=False)
            seen: list[tuple[int, float]] = []

            @worker.handler("limited")
            async def limited(ctx: jobwire.JobContext) -> None:
                seen.append((ctx.attempt, time.monotonic()))
                if len(seen) == 1:
                    raise jobwire.RateLimited(p["rate_limited_ms"] / 1000)

            run = Running(worker)
            [job] = await wait_completed(client, q, ["limited"])
            await run.stop()
    assert [a for a, _ in seen] == [1, 1]
    # Measured from before the Fail was sent, so the server's own wait is no longer than this.
    assert (seen[1][1] - seen[0][1]) * 1000 >= p["rate_limited_ms"]
    assert job.attempts_made == 1 and job.max_attempts == 1
    assert job.errors[-1].disposition == pb.FAIL_DISPOSITION_RATE_LIMITED


@scenario
async def sigterm_drains(sc: Scenario, tmp: Path) -> None:
    p = sc["params"]
    q = new_queue()
    with JobwireServer(tmp, sc["server"]) as server:
        async with jobwire.Client(server.target) as client:
            await client.enqueue(q, "sleep", b"", job_id="held")
            # Concurrency 2: the worker has a free credit when the second job arrives, so only
            # its Drain keeps that job away.
            program = Path(__file__).with_name("worker_program.py")
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                str(program),
                server.target,
                q,
                str(p["handler_ms"]),
                "2",
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
            )
            assert proc.stdout is not None
            output: list[str] = []

            async def line_with(text: str, timeout: float = 15) -> None:
                assert proc.stdout is not None
                deadline = time.monotonic() + timeout
                while time.monotonic() < deadline:
                    try:
                        line = (
                            await asyncio.wait_for(proc.stdout.readline(), deadline - time.monotonic())
                        ).decode()
                    except asyncio.TimeoutError:
                        break
                    output.append(line)
                    if text in line:
                        return
                    if not line:
                        break
                pytest.fail(f"the worker program never printed {text!r}:\n{''.join(output)}")

            try:
                await line_with("leased held attempt 1")
                await asyncio.sleep(p["signal_after_ms"] / 1000)
                proc.send_signal(signal.SIGTERM)
                signalled = time.monotonic()
                await line_with("SIGTERM: draining")
                await asyncio.sleep(0.2)  # the Drain is on the wire well before this
                await client.enqueue(q, "sleep", b"", job_id="after-signal")
                rest, _ = await asyncio.wait_for(proc.communicate(), 30)
                output.append(rest.decode())
                code = proc.returncode
                took = time.monotonic() - signalled
            finally:
                if proc.returncode is None:
                    proc.kill()
                    await proc.wait()
            held, after = await job_states(client, q, ["held", "after-signal"])
    text = "".join(output)
    assert code == 0, text
    assert took < 25, text
    assert "finished held" in text and "leased after-signal" not in text, text
    assert held.state == pb.JOB_STATE_COMPLETED and held.attempts_made == 1, text
    assert after.state == pb.JOB_STATE_WAITING and after.attempts_made == 0, text


@scenario
async def shutdown_hands_back_uncharged(sc: Scenario, tmp: Path) -> None:
    p = sc["params"]
    q = new_queue()
    with JobwireServer(tmp, sc["server"]) as server:
        async with jobwire.Client(server.target) as client:
            await client.enqueue(q, "slow", b"", job_id="slow", max_attempts=p["max_attempts"])
            first = jobwire.Worker(client, [q], grace=p["grace_ms"] / 1000, handle_signals=False)
            seen: list[int] = []

            @first.handler("slow")
            async def slow(ctx: jobwire.JobContext) -> None:
                seen.append(ctx.attempt)
                await asyncio.sleep(p["handler_ms"] / 1000)

            run = Running(first)
            await eventually(lambda: asyncio.sleep(0, first.running == 1), what="the handler running")
            await run.stop()
            job = await client.get_job(q, "slow")
            listed = await client.dead_letters.list(q)
            assert job.state in (pb.JOB_STATE_WAITING, pb.JOB_STATE_ACTIVE), job
            assert job.attempts_made == 0 and not job.errors, job
            assert not listed

            second = jobwire.Worker(client, [q], handle_signals=False)

            @second.handler("slow")
            async def quick(ctx: jobwire.JobContext) -> None:
                seen.append(ctx.attempt)

            run = Running(second)
            [job] = await wait_completed(client, q, ["slow"])
            await run.stop()
    assert seen == [1, 1]
    assert job.attempts_made == 1 and job.max_attempts == p["max_attempts"]


@scenario
async def server_restart_mid_run(sc: Scenario, tmp: Path) -> None:
    p = sc["params"]
    q, ids = new_queue(), [f"r{i}" for i in range(p["jobs"])]
    with (
        RedisServer(tmp / "redis") as redis,
        JobwireServer(tmp / "jobwire", sc["server"], redis_url=redis.url) as server,
    ):
        async with jobwire.Client(server.target) as client:
            for i in ids:
                await client.enqueue(q, "work", b"", job_id=i, max_attempts=3)
            worker = jobwire.Worker(
                client, [q], concurrency=p["concurrency"], worker_id="restart-worker", handle_signals=False
            )
            calls = Counter[str]()

            @worker.handler("work")
            async def work(ctx: jobwire.JobContext) -> None:
                calls[ctx.job_id] += 1
                await asyncio.sleep(p["handler_ms"] / 1000)
                # On a slow machine the restart may outlast the handler; hold the job until the
                # worker renewed its leases (or 10 s), so the renewal is what the test sees.
                with contextlib.suppress(pytest.fail.Exception):
                    await eventually(lambda: asyncio.sleep(0, worker.stats.extended >= p["jobs"]), 10)

            run = Running(worker)
            await eventually(lambda: asyncio.sleep(0, worker.running == p["jobs"]), 15, "every job running")

            # The server confirms each lease call once its reply reached the stream; a call it had
            # not confirmed when it died hands its jobs back uncharged by design. Kill it after.
            async def confirmed() -> bool:
                return redis.command("EXISTS", f"jw:{{{q}}}:calls", f"jw:{{{q}}}:call_jobs") == b":0"

            await eventually(confirmed, 10, "the lease calls confirmed")
            server.kill()
            await asyncio.sleep(p["down_ms"] / 1000)
            await asyncio.get_running_loop().run_in_executor(None, server.start)
            jobs = await wait_completed(client, q, ids)
            await run.stop()
        log = server.log_path.read_text()
    assert calls == Counter(ids)
    assert all(j.attempts_made == 1 and not j.errors for j in jobs), jobs
    assert worker.stats.reconnects >= 1
    assert worker.stats.extended >= p["jobs"]
    assert worker.stats.lost == 0
    assert log.count("worker subscribed worker_id=restart-worker") >= 2


@scenario
async def stream_killed_by_network(sc: Scenario, tmp: Path) -> None:
    p = sc["params"]
    q = new_queue()
    with JobwireServer(tmp, sc["server"]) as server:
        proxy = Proxy("127.0.0.1", server.grpc_port)
        await proxy.start()
        try:
            async with jobwire.Client(proxy.address) as client:
                await client.enqueue(q, "work", b"", job_id="cut", max_attempts=3)
                worker = jobwire.Worker(client, [q], handle_signals=False)
                calls: list[int] = []
                started = asyncio.Event()

                @worker.handler("work")
                async def work(ctx: jobwire.JobContext) -> None:
                    calls.append(ctx.attempt)
                    started.set()
                    await asyncio.sleep(p["handler_ms"] / 1000)

                run = Running(worker)
                await asyncio.wait_for(started.wait(), 15)
                await asyncio.sleep(p["cut_after_ms"] / 1000)
                assert proxy.cut() >= 2
                [job] = await wait_completed(client, q, ["cut"])
                await run.stop()
        finally:
            await proxy.close()
    assert calls == [1]
    assert job.attempts_made == 1 and not job.errors
    assert worker.stats.reconnects >= 1 and worker.stats.extended >= 1 and worker.stats.lost == 0
    assert proxy.connections >= 2


def handled(metrics: str, method: str, code: str) -> float:
    """The value of grpc_server_handled_total for ``method`` answered ``code`` (0 if absent)."""
    want = (f'grpc_method="{method}"', f'grpc_code="{code}"')
    for line in metrics.splitlines():
        if line.startswith("grpc_server_handled_total{") and all(w in line for w in want):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


@scenario
async def unreplicated_enqueue_exists_once(sc: Scenario, tmp: Path) -> None:
    q = new_queue()
    with JobwireServer(tmp, sc["server"]) as server:
        async with jobwire.Client(server.target) as client:
            with pytest.raises(grpc.aio.AioRpcError) as raised:
                await client.enqueue(q, "work", b"")
            assert raised.value.code() == grpc.StatusCode.UNAVAILABLE
            job_id = jobwire.not_replicated_job_id(raised.value)
            assert job_id, raised.value
            job = await client.get_job(q, job_id)
            assert job.job_id == job_id
            stats = await client.queues.stats(q)
            assert (stats.waiting, stats.delayed, stats.active) == (1, 0, 0)
            url = f"http://127.0.0.1:{server.http_port}/metrics"
            text = await asyncio.to_thread(lambda: urllib.request.urlopen(url, timeout=10).read().decode())
            assert handled(text, "Enqueue", "Unavailable") > 1, "the SDK retried with the job_id"


# The job-control scenarios (issue 16) live in control_scenarios.py.
def _on_fresh_queue(
    test: Callable[[Scenario, Path, str], Awaitable[None]],
) -> Callable[[Scenario, Path], Awaitable[None]]:
    async def run(sc: Scenario, tmp: Path) -> None:
        await test(sc, tmp, new_queue())

    return run


IMPLEMENTED.update({id: _on_fresh_queue(test) for id, test in CONTROL_SCENARIOS.items()})


# === the tests ===


def test_every_scenario_has_a_test() -> None:
    missing = sorted(set(SCENARIOS) - set(IMPLEMENTED))
    assert not missing, f"scenarios in clients/conformance/scenarios.json without a Python test: {missing}"


@pytest.mark.parametrize("scenario_id", sorted(SCENARIOS))
async def test_scenario(scenario_id: str, tmp_path: Path) -> None:
    if scenario_id not in IMPLEMENTED:
        pytest.fail(f"no Python test for scenario {scenario_id!r}")
    await IMPLEMENTED[scenario_id](SCENARIOS[scenario_id], tmp_path)
