/** The GroupService wrapper (client.groups) and the job-control fields of QueueConfig and QueueStats, against a real jobwire. */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { Client, msToDuration, rateLimit } from "../src/index.js";
import type { JobwireServer } from "../src/testing/index.js";
import { serverAndClient, uniqueQueue } from "./helpers.js";

describe("groups against a server", () => {
  let server: JobwireServer;
  let client: Client;
  before(async () => ({ server, client } = await serverAndClient()));
  after(async () => {
    client?.close();
    await server?.stop();
  });

  it("client.groups lists, reads, configures, pauses and resumes groups; the queue config has the new fields", async () => {
    const queue = uniqueQueue("groups-admin");
    for (let i = 0; i < 2; i++) await client.enqueue(queue, "n", {}, { jobId: `a${i}`, groupKey: "tenant-a" });
    await client.enqueue(queue, "n", {}, { jobId: "b0", groupKey: "tenant-b" });
    const groups = new Map<string, number>();
    for await (const g of client.groups.all(queue)) groups.set(g.groupKey, g.waiting);
    assert.deepEqual([...groups.entries()].sort(), [
      ["tenant-a", 2],
      ["tenant-b", 1],
    ]);
    let config = await client.groups.updateConfig(queue, "tenant-a", { weight: 3, maxActive: 1, rateLimit: { max: 5, periodMs: 1000 } });
    assert.deepEqual([config.weight, config.maxActive, config.rateLimit?.max], [3, 1, 5]);
    config = await client.groups.updateConfig(queue, "tenant-a", { reset: ["weight"] });
    assert.equal(config.weight, undefined);
    assert.equal(config.maxActive, 1);
    const until = await client.groups.pause(queue, "tenant-a", 60_000);
    assert.ok(until && until.getTime() > Date.now());
    const g = await client.groups.get(queue, "tenant-a");
    assert.equal(g.waiting, 2);
    assert.ok(g.pausedUntil);
    await client.groups.resume(queue, "tenant-a");
    assert.equal((await client.groups.get(queue, "tenant-a")).pausedUntil, undefined);
    const stats = await client.queues.stats(queue);
    assert.equal(stats.groupsWaiting, 2);
    assert.deepEqual(
      stats.topGroups.map((t) => [t.groupKey, t.waiting]),
      [
        ["tenant-a", 2],
        ["tenant-b", 1],
      ],
    );
    const qc = await client.queues.updateConfig(
      queue,
      { groupMaxActive: 4, groupRateLimit: rateLimit({ max: 10, periodMs: 1000 }), cancelGrace: msToDuration(5000), deadLetterExpired: true },
      ["group_max_active", "group_rate_limit", "cancel_grace", "dead_letter_expired"],
    );
    assert.deepEqual([qc.groupMaxActive, qc.groupRateLimit?.max, qc.cancelGrace?.seconds, qc.deadLetterExpired], [4, 10, 5, true]);
  });
});
