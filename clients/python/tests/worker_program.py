"""The SDK's worker program for the sigterm_drains scenario: a jobwire.sync.Worker with signal
handling left on, one handler that sleeps, printing what it does (flushed, one line each).

    python worker_program.py TARGET QUEUE HANDLER_MS CONCURRENCY
"""

from __future__ import annotations

import logging
import sys
import time

import jobwire
import jobwire.sync


def main() -> int:
    target, queue, handler_ms, concurrency = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="log %(message)s")
    with jobwire.sync.Client(target) as client:
        worker = jobwire.sync.Worker(client, [queue], concurrency=concurrency, worker_id="sigterm-worker")

        @worker.handler("sleep")
        def sleep(ctx: jobwire.JobContext) -> None:
            print(f"leased {ctx.job_id} attempt {ctx.attempt}", flush=True)
            time.sleep(handler_ms / 1000)
            print(f"finished {ctx.job_id}", flush=True)

        print("running", flush=True)
        worker.run()
    print("exited", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
