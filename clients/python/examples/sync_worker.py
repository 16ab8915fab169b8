import os

import jobwire
import jobwire.sync

with jobwire.sync.Client(os.environ.get("JOBWIRE_TARGET", "127.0.0.1:50051")) as client:
    client.enqueue("reports", "render", {"id": 7}, job_id="report:7")
    worker = jobwire.sync.Worker(client, ["reports"], concurrency=4)

    @worker.handler("render")
    def render(ctx: jobwire.JobContext) -> None:  # plain functions run in a thread pool
        print("rendering report", ctx.json()["id"], flush=True)

    worker.run()  # blocks until SIGTERM/SIGINT
