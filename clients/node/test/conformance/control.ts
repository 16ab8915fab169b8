/**
 * The job-control scenarios (issue 16): a cancel reaching a running handler, a checkpoint
 * resuming the next attempt, a result attached at ack, cancel / delete / expire from the client,
 * and group keys with a group paused by a rate-limited handler.
 */
import assert from "node:assert/strict";
import { pb, RateLimited, RetryAfter } from "../../src/index.js";
import { delay, eventually, uniqueQueue } from "../helpers.js";
import { param, untilState, withServer, worker, type Scenario, type ScenarioTest } from "./scenario.js";

const { JobState, FailDisposition } = pb;

/** The scenario's string parameter `name`. */
function text(s: Scenario, name: string): string {
  const v = (s.params as Record<string, unknown>)[name];
  if (typeof v !== "string") throw new Error(`scenario ${s.id} has no string params.${name}`);
  return v;
}

export const control: Record<string, ScenarioTest> = {
  async checkpoint_resumes_next_attempt(s) {
    const checkpoint = text(s, "checkpoint");
    const first = param(s, "first_progress");
    await withServer(s, async (_server, client) => {
      const queue = uniqueQueue("checkpoint");
      const seen: [number, string][] = [];
      const w = worker(client, { queues: [queue] }).handle("resumable", async (_job, ctx) => {
        seen.push([ctx.attempt, ctx.checkpoint.toString("utf8")]);
        if (ctx.attempt === 1) {
          await ctx.progress(first, "step 1 done");
          await ctx.saveCheckpoint(Buffer.from(checkpoint));
          assert.equal(ctx.checkpoint.toString("utf8"), checkpoint);
          throw new RetryAfter(100, "provider hiccup");
        }
        await ctx.progress(100, "all steps done");
      });
      await client.enqueue(queue, "resumable", {}, { jobId: "r", maxAttempts: 2 });
      const done = w.run();
      const job = await untilState(client, queue, "r", JobState.JOB_STATE_COMPLETED);
      await w.close();
      await done;
      assert.deepEqual(seen, [
        [1, ""],
        [2, checkpoint],
      ]);
      assert.equal(job.attemptsMade, 2);
      assert.equal(job.progress, 100);
      assert.equal(job.progressMessage, "all steps done");
      assert.equal(job.checkpoint.toString("utf8"), checkpoint);
      assert.ok(job.progressTime);
    });
  },

  async result_attached_at_ack(s) {
    const result = text(s, "result");
    await withServer(s, async (_server, client) => {
      const queue = uniqueQueue("result");
      const w = worker(client, { queues: [queue] }).handle("answer", (_job, ctx) => {
        ctx.setResult(result);
      });
      await client.enqueue(queue, "answer", {}, { jobId: "a" });
      const done = w.run();
      const job = await untilState(client, queue, "a", JobState.JOB_STATE_COMPLETED);
      await w.close();
      await done;
      assert.equal(job.result.toString("utf8"), result);
    });
  },

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
