#!/usr/bin/env python3
"""Groups: three tenants share one queue, and none of them waits behind another's backlog.

The tenants of a report service enqueue to one queue: `bigco` first drops 1000 reports, then
`smallco` asks for 10 and `vip` (a customer paying for a larger share) for 60. One worker with
concurrency 4 renders them (2 ms each). The demo runs the same load twice:

  (a) one FIFO queue: the jobs carry no group key, so they are leased in the order they came;
      smallco's 10 reports wait behind bigco's 1000;
  (b) groups: every job carries its tenant as `group_key`. The queue's groups take turns
      (round-robin across the groups with waiting jobs, each in proportion to its weight: vip
      has weight 3, the others 1), and the queue's `group_max_active = 3` lets no tenant hold
      all 4 of the worker's slots at once.

It prints one markdown table row per tenant and run: the lease (in start order, 1-based) at
which the tenant's last job started, and the most of its jobs running at once. It exits 1 when
a number is outside what the design promises:

  (a) smallco's last job starts after all of bigco's (lease 1001 or later);
  (b) smallco's 10 jobs all start within its fair share: it holds one turn of every
      1 + 1 + 3 = 5 while the three tenants have waiting jobs, so its 10th job starts by lease
      10 * 5 = 50 (plus the 4 the worker may already hold: 54); vip's 60 start by lease
      60 * 5 / 3 = 100 plus the same slack, long before bigco's backlog drains; and no tenant
      ever runs more than 3 jobs at once.

Usage: python multi_tenant.py --server 127.0.0.1:50051
It uses the Python SDK (clients/python; scripts/setup.sh installs it into .venv) and deletes
and recreates the queues `reports-fifo` and `reports` on that server.
Exit codes: 0 the numbers hold, 1 a number differs, 2 the run failed (server unreachable, an
RPC error, jobs not done in time).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from dataclasses import dataclass, field

import grpc

import jobwire
from jobwire import pb

TENANTS = [("bigco", 1000, 1), ("smallco", 10, 1), ("vip", 60, 3)]
"""(tenant, jobs, weight), in the order they enqueue."""
CONCURRENCY = 4
GROUP_MAX_ACTIVE = 3
JOB_SECONDS = 0.002


@dataclass
class Run:
    """What one run saw: the tenant of each job in start order, and the most running at once."""

    starts: list[str] = field(default_factory=list)
    running: dict[str, int] = field(default_factory=dict)
    most: dict[str, int] = field(default_factory=dict)

    def last_start(self, tenant: str) -> int:
        return max(i + 1 for i, t in enumerate(self.starts) if t == tenant)


async def fresh_queue(client: jobwire.Client, queue: str) -> None:
    try:
        await client.queues.delete(queue, force=True)
    except grpc.aio.AioRpcError as e:
        if e.code() != grpc.StatusCode.NOT_FOUND:
            raise


async def run(client: jobwire.Client, queue: str, grouped: bool) -> Run:
    await fresh_queue(client, queue)
    if grouped:
        await client.queues.update_config(
            queue, pb.QueueConfig(group_max_active=GROUP_MAX_ACTIVE), ["group_max_active"]
        )
        for tenant, _, weight in TENANTS:
            if weight != 1:
                await client.groups.update_config(queue, tenant, weight=weight)
    # Every job is enqueued before the worker starts, bigco's first: the worst case for FIFO.
    for tenant, jobs, _ in TENANTS:
        specs = [
            jobwire.job_spec(queue, "render-report", {"tenant": tenant}, group_key=tenant if grouped else None)
            for _ in range(jobs)
        ]
        for i in range(0, len(specs), 1000):
            for r in await client.enqueue_batch(specs[i : i + 1000]):
                if r.HasField("error"):
                    raise RuntimeError(f"enqueue refused: {r.error.message}")
    seen = Run()
    total = sum(jobs for _, jobs, _ in TENANTS)
    done = asyncio.Event()
    worker = jobwire.Worker(client, [queue], concurrency=CONCURRENCY, handle_signals=False)

    @worker.handler("render-report")
    async def render(ctx: jobwire.JobContext) -> None:
        tenant = ctx.json()["tenant"]
        seen.starts.append(tenant)
        seen.running[tenant] = seen.running.get(tenant, 0) + 1
        seen.most[tenant] = max(seen.most.get(tenant, 0), seen.running[tenant])
        await asyncio.sleep(JOB_SECONDS)
        seen.running[tenant] -= 1
        if len(seen.starts) == total:
            done.set()

    task = asyncio.create_task(worker.run())
    try:
        await asyncio.wait_for(done.wait(), 120)
    finally:
        worker.stop()
        await task
    return seen


def check(fifo: Run, groups: Run) -> list[str]:
    wrong = []
    if fifo.last_start("smallco") <= 1000:
        wrong.append(f"FIFO: smallco's last job started at lease {fifo.last_start('smallco')}, not after bigco's 1000")
    if groups.last_start("smallco") > 10 * 5 + CONCURRENCY:
        wrong.append(f"groups: smallco's last job started at lease {groups.last_start('smallco')}, past its share (54)")
    if groups.last_start("vip") > 60 * 5 // 3 + CONCURRENCY:
        wrong.append(f"groups: vip's last job started at lease {groups.last_start('vip')}, past its share (104)")
    for tenant, most in groups.most.items():
        if most > GROUP_MAX_ACTIVE:
            wrong.append(f"groups: {tenant} ran {most} jobs at once, over group_max_active {GROUP_MAX_ACTIVE}")
    return wrong


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", default="127.0.0.1:50051", help="host:port of a jobwire server")
    args = parser.parse_args()
    try:
        async with jobwire.Client(args.server) as client:
            fifo = await run(client, "reports-fifo", grouped=False)
            groups = await run(client, "reports", grouped=True)
    except (grpc.aio.AioRpcError, RuntimeError, TimeoutError) as e:
        print(f"multi_tenant: the run failed: {e}", file=sys.stderr)
        return 2
    print("| run | tenant | jobs | weight | last job started at lease | most running at once |")
    print("|---|---|---|---|---|---|")
    for name, r in (("one FIFO queue", fifo), ("groups", groups)):
        for tenant, jobs, weight in TENANTS:
            w = weight if name == "groups" else "-"
            print(f"| {name} | {tenant} | {jobs} | {w} | {r.last_start(tenant)} | {r.most[tenant]} |")
    wrong = check(fifo, groups)
    for w in wrong:
        print(f"multi_tenant: {w}", file=sys.stderr)
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
