import asyncio
import os
from datetime import datetime, timedelta, timezone

import jobwire


async def main() -> None:
    async with jobwire.Client(os.environ.get("JOBWIRE_TARGET", "127.0.0.1:50051")) as client:
        soon = datetime.now(timezone.utc) + timedelta(hours=1)
        await client.enqueue("exports", "export", {"rows": 1000}, job_id="export:7", group_key="tenant-a")
        await client.enqueue("exports", "digest", b"", job_id="digest:7", expire_at=soon)  # or ttl=3600
        job, cancelled = await client.cancel_job("exports", "export:7", reason="customer left")
        print("export:7", jobwire.pb.JobState.Name(job.state), "cancelled", cancelled)
        count = await client.cancel_jobs("exports", name="digest", reason="digest off")
        print("cancelled", count.cancelled, "signalled", count.signalled)
        await client.delete_job("exports", "export:7")  # not while ACTIVE: cancel it first


asyncio.run(main())
