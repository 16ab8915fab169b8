/**
 * The job-control scenarios (issue 16): a cancel reaching a running handler, a checkpoint
 * resuming the next attempt, a result attached at ack, cancel / delete / expire from the client,
 * and group keys with a group paused by a rate-limited handler.
 */
import assert from "node:assert/strict";
import { JobCancelled, pb, RateLimited, RetryAfter } from "../../src/index.js";
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
  async cancel_reaches_running_handler(s) {
    const maxSignalMs = param(s, "max_signal_ms");
    const reason = text(s, "reason");
    await withServer(s, async (_server, client) => {
      const queue = uniqueQueue("cancel");
      const calls: number[] = [];
      let started: () => void = () => undefined;
      const running = new Promise<void>((r) => (started = r));
      let stopped: { at: number; reason: unknown; ctxReason: string | undefined } | undefined;
      const w = worker(client, { queues: [queue] }).handle("long", async (_job, ctx) => {
        calls.push(ctx.attempt);
        started();
        // Waits on the SDK's cancellation signal, up to 10 s.
        await new Promise<void>((resolve) => {
          const t = setTimeout(resolve, 10_000);
          ctx.signal.addEventListener("abort", () => {
            clearTimeout(t);
            resolve();
          });
        });
        stopped = { at: Date.now(), reason: ctx.signal.reason, ctxReason: ctx.cancelReason };
        // Stops because of the cancel (returning would say it finished anyway: an ack).
        ctx.signal.throwIfAborted();
      });
      await client.enqueue(queue, "long", {}, { jobId: "c", maxAttempts: 3 });
      const done = w.run();
      await running;
      const asked = Date.now();
      const { job, cancelled } = await client.cancelJob(queue, "c", reason);
      assert.ok(cancelled);
      assert.ok(job.state === JobState.JOB_STATE_ACTIVE || job.state === JobState.JOB_STATE_CANCELLED, `state ${job.state}`);
      const end = await untilState(client, queue, "c", JobState.JOB_STATE_CANCELLED);
      await delay(500); // a second run would start within this
      await w.close();
      await done;
      assert.deepEqual(calls, [1]);
      assert.ok(stopped, "the handler never stopped");
      assert.ok(stopped.at - asked <= maxSignalMs, `signalled after ${stopped.at - asked} ms`);
      assert.ok(stopped.reason instanceof JobCancelled && stopped.reason.reason === reason);
      assert.equal(stopped.ctxReason, reason);
      assert.equal(end.cancelReason, reason);
      assert.ok(end.cancelTime);
      assert.equal(w.stats().settled, 1);
    });
  },

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

  async cancel_delete_expire_from_client(s) {
    const ttlMs = param(s, "ttl_ms");
    const waitMs = param(s, "wait_ms");
    await withServer(s, async (_server, client) => {
      const queue = uniqueQueue("client-control");
      await client.enqueue(queue, "later", {}, { jobId: "d", delay: 3_600_000 });
      const { job, cancelled } = await client.cancelJob(queue, "d", "not needed");
      assert.ok(cancelled);
      assert.equal(job.state, JobState.JOB_STATE_CANCELLED);
      assert.equal(job.cancelReason, "not needed");
      assert.equal(await client.deleteJob(queue, "d"), JobState.JOB_STATE_CANCELLED);
      const again = await client.enqueue(queue, "later", {}, { jobId: "d", delay: 3_600_000 });
      assert.ok(again.created);
      assert.equal(again.job.state, JobState.JOB_STATE_DELAYED);

      await client.enqueue(queue, "short-lived", {}, { jobId: "t", ttl: ttlMs });
      assert.ok((await client.getJob(queue, "t")).expireTime);
      const expired = await untilState(client, queue, "t", JobState.JOB_STATE_EXPIRED, waitMs);
      assert.equal(expired.attemptsMade, 0);

      for (let i = 0; i < 3; i++) await client.enqueue(queue, "newsletter", {}, { jobId: `n${i}` });
      for (let i = 0; i < 2; i++) await client.enqueue(queue, "invoice", {}, { jobId: `i${i}` });
      const count = await client.cancelJobs(queue, { name: "newsletter" }, { reason: "campaign stopped", limit: 2 });
      assert.deepEqual(count, { cancelled: 3, signalled: 0 });
      for (let i = 0; i < 3; i++) {
        const j = await client.getJob(queue, `n${i}`);
        assert.equal(j.state, JobState.JOB_STATE_CANCELLED);
        assert.equal(j.cancelReason, "campaign stopped");
      }
      for (let i = 0; i < 2; i++) assert.equal((await client.getJob(queue, `i${i}`)).state, JobState.JOB_STATE_WAITING);
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
