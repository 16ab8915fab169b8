import asyncio
import os

import jobwire


async def main() -> None:
    async with jobwire.Client(os.environ.get("JOBWIRE_TARGET", "127.0.0.1:50051")) as client:
        worker = jobwire.Worker(client, ["emails"], concurrency=8)

        @worker.handler("send-welcome")
        async def send_welcome(ctx: jobwire.JobContext) -> None:
            print("sending to", ctx.json()["to"], "attempt", ctx.attempt, flush=True)

        await worker.run()  # until SIGTERM/SIGINT: drain, finish held jobs, close


asyncio.run(main())
