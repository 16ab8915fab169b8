import asyncio
import os

import jobwire


async def main() -> None:
    async with jobwire.Client(os.environ.get("JOBWIRE_TARGET", "127.0.0.1:50051")) as client:
        resp = await client.enqueue(
            "emails", "send-welcome", {"to": "ada@example.com"}, job_id="welcome:ada", max_attempts=3
        )
        print("enqueued", resp.job.job_id, "created", resp.created)


asyncio.run(main())
