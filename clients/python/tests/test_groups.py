"""The GroupService wrapper (client.groups) and the job-control fields of QueueConfig and
QueueStats, against a real server."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import jobwire
import jobwire.sync
from jobwire import pb
from jobwire.testing import JobwireServer


async def test_groups_admin_and_the_queue_config_fields(client: jobwire.Client, queue: str) -> None:
    for i in range(2):
        await client.enqueue(queue, "n", b"", job_id=f"a{i}", group_key="tenant-a")
    await client.enqueue(queue, "n", b"", job_id="b0", group_key="tenant-b")
    groups = {g.group_key: g for g in await client.groups.list(queue)}
    assert {k: g.waiting for k, g in groups.items()} == {"tenant-a": 2, "tenant-b": 1}
    config = await client.groups.update_config(
        queue, "tenant-a", weight=3, max_active=1, rate_limit=jobwire.rate_limit(5, 1.0)
    )
    assert (config.weight, config.max_active, config.rate_limit.max) == (3, 1, 5)
    config = await client.groups.update_config(queue, "tenant-a", reset=["weight"])
    assert not config.HasField("weight") and config.max_active == 1
    until = await client.groups.pause(queue, "tenant-a", timedelta(minutes=1))
    assert until > datetime.now(timezone.utc)
    group = await client.groups.get(queue, "tenant-a")
    assert group.waiting == 2 and group.HasField("paused_until") and group.config.max_active == 1
    await client.groups.resume(queue, "tenant-a")
    assert not (await client.groups.get(queue, "tenant-a")).HasField("paused_until")
    stats = await client.queues.stats(queue)
    assert stats.groups_waiting == 2
    assert [(g.group_key, g.waiting) for g in stats.top_groups] == [("tenant-a", 2), ("tenant-b", 1)]
    qc = pb.QueueConfig(group_max_active=4, dead_letter_expired=True)
    qc.cancel_grace.FromSeconds(5)
    qc.group_rate_limit.CopyFrom(jobwire.rate_limit(10, timedelta(seconds=1)))
    paths = ["group_max_active", "group_rate_limit", "cancel_grace", "dead_letter_expired"]
    got = await client.queues.update_config(queue, qc, paths)
    assert got.group_max_active == 4 and got.dead_letter_expired and got.cancel_grace.seconds == 5
    assert got.group_rate_limit.max == 10


def test_the_sync_client_has_groups(jobwire_server: JobwireServer, queue: str) -> None:
    with jobwire.sync.Client(jobwire_server.target) as client:
        client.enqueue(queue, "n", b"", job_id="x", group_key="g")
        assert [(g.group_key, g.waiting) for g in client.groups.list(queue)] == [("g", 1)]
        client.groups.pause(queue, "g")
        assert client.groups.get(queue, "g").HasField("paused_until")
