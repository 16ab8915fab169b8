/**
 * The job-control scenarios (issue 16): a cancel reaching a running handler, a checkpoint
 * resuming the next attempt, a result attached at ack, cancel / delete / expire from the client,
 * and group keys with a group paused by a rate-limited handler.
 */
import assert from "node:assert/strict";
import { pb, RateLimited } from "../../src/index.js";
import { delay, eventually, uniqueQueue } from "../helpers.js";
import { param, untilState, withServer, worker, type ScenarioTest } from "./scenario.js";

const { JobState, FailDisposition } = pb;

export const control: Record<string, ScenarioTest> = {
  async group_key_and_pause_group(s) {
    const pauseMs = param(s, "pause_ms");
    await withServer(s, async (_server, client) => {
      const queue = uniqueQueue("groups");
      await client.enqueue(queue, "call", {}, { jobId: "a1", groupKey: "tenant-a" });
      assert.equal((await client.getJob(queue, "a1")).groupKey, "tenant-a");
      const leased = new Map<string, number[]>();
      let limitedAt = 0;
      const w = worker(client, { queues: [queue], concurrency: 2 }).handle("call", (job) => {
        leased.set(job.id, [...(leased.get(job.id) ?? []), Date.now()]);
        if (job.id === "a1" && limitedAt === 0) {
          limitedAt = Date.now();
          throw new RateLimited(pauseMs, { message: "429 for tenant-a", pauseGroup: true });
        }
      });
      const done = w.run();
      await eventually("a1 rate limited", () => (limitedAt > 0 ? true : undefined));
      await delay(100); // the Fail is applied well before this
      await client.enqueue(queue, "call", {}, { jobId: "a2", groupKey: "tenant-a" });
      await client.enqueue(queue, "call", {}, { jobId: "b1", groupKey: "tenant-b" });
      const b1 = await untilState(client, queue, "b1", JobState.JOB_STATE_COMPLETED, pauseMs);
      const a1Then = await client.getJob(queue, "a1");
      const a2Then = await client.getJob(queue, "a2");
      const a1 = await untilState(client, queue, "a1", JobState.JOB_STATE_COMPLETED);
      const a2 = await untilState(client, queue, "a2", JobState.JOB_STATE_COMPLETED);
      await w.close();
      await done;
      assert.equal(b1.groupKey, "tenant-b");
      assert.equal(a2.groupKey, "tenant-a");
      assert.notEqual(a1Then.state, JobState.JOB_STATE_COMPLETED);
      assert.equal(a2Then.state, JobState.JOB_STATE_WAITING);
      const at = (id: string, i: number): number => leased.get(id)?.[i] ?? Number.NaN;
      assert.ok(at("b1", 0) - limitedAt < pauseMs, "tenant-b waited for tenant-a's pause");
      // tenant-a leased nothing during its pause: its retry and the job enqueued meanwhile both
      // started after it.
      assert.ok(Math.min(at("a1", 1), at("a2", 0)) - limitedAt >= pauseMs, "tenant-a leased during its pause");
      assert.equal(a1.attemptsMade, 1);
      assert.equal(a1.errors[a1.errors.length - 1]?.disposition, FailDisposition.FAIL_DISPOSITION_RATE_LIMITED);
    });
  },
};
