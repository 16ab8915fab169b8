"""The end-to-end no-op throughput of the Python SDK, as `jobwire bench --only e2e --e2e 1x100
-n 20000` measures it: N jobs of 16 bytes pre-filled with EnqueueBatch (1000 per call), then
one Worker with concurrency 100 and a no-op handler; jobs/s = N / (first lease -> last ack).

    JOBWIRE_BIN=target/release/jobwire .venv/bin/python clients/python/bench/e2e.py
    .venv/bin/python clients/python/bench/e2e.py --target 127.0.0.1:50051   # a running server

Without --target it starts `jobwire serve` (embedded Redis) on free ports in a temporary
directory. Prints one line: ``python e2e 1x100: N jobs/s``.
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import sys
import tempfile
import time

import jobwire
from jobwire.testing import JobwireServer


async def bench(target: str, jobs: int, concurrency: int) -> float:
    queue = f"bench-py-{secrets.token_hex(4)}"
    async with jobwire.Client(target) as client:
        await client.wait_ready()
        payload = b"x" * 16
        for start in range(0, jobs, 1000):
            specs = [jobwire.job_spec(queue, "noop", payload) for _ in range(min(1000, jobs - start))]
            results = await client.enqueue_batch(specs)
            if any(r.HasField("error") for r in results):
                raise SystemExit(f"enqueue failed: {next(r.error for r in results if r.HasField('error'))}")
        worker = jobwire.Worker(client, [queue], concurrency=concurrency, handle_signals=False)

        @worker.handler("noop")
        async def noop(ctx: jobwire.JobContext) -> None:
            return None

        run = asyncio.create_task(worker.run())
        deadline = time.monotonic() + 600
        while worker.stats.settled < jobs:
            if run.done() or time.monotonic() > deadline:
                raise SystemExit(f"only {worker.stats.settled} of {jobs} jobs settled")
            await asyncio.sleep(0.01)
        worker.stop()
        await run
        first, last = worker.stats.first_lease_at, worker.stats.last_settled_at
        assert first is not None and last is not None
        return jobs / (last - first)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", help="a running jobwire (HOST:PORT); default: start one")
    ap.add_argument("-n", "--jobs", type=int, default=20_000)
    ap.add_argument("--concurrency", type=int, default=100)
    args = ap.parse_args()
    if args.target:
        rate = asyncio.run(bench(args.target, args.jobs, args.concurrency))
    else:
        with tempfile.TemporaryDirectory(prefix="jobwire-bench-") as tmp, JobwireServer(tmp) as server:
            rate = asyncio.run(bench(server.target, args.jobs, args.concurrency))
    print(f"python e2e 1x{args.concurrency}: {rate:.0f} jobs/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
