/**
 * The scenarios about one healthy stream: concurrency as credits, leases kept through long
 * handlers by heartbeats, and the three typed errors.
 */
import assert from "node:assert/strict";
import { NonRetryable, pb, RateLimited, RetryAfter } from "../../src/index.js";
import { delay, uniqueQueue } from "../helpers.js";
import { param, untilState, withServer, work, worker, type ScenarioTest } from "./scenario.js";

const { JobState, DeadReason, FailDisposition } = pb;

/** Server-clock milliseconds between two timestamps of the job record. */
function between(a: Date | undefined, b: Date | undefined): number {
  assert.ok(a && b, "timestamps missing");
  return b.getTime() - a.getTime();
}

export const basic: Record<string, ScenarioTest> = {
  async concurrency_never_exceeded(s) {
    const concurrency = param(s, "concurrency");
    const jobs = param(s, "jobs");
    const handlerMs = param(s, "handler_ms");
    await withServer(s, async (_server, client) => {
      const queue = uniqueQueue("conc");
      const runs = new Map<string, number>();
      let running = 0;
      let most = 0;
      const w = worker(client, { queues: [queue], concurrency }).handle("sleep", async (job, ctx) => {
        runs.set(job.id, (runs.get(job.id) ?? 0) + 1);
        most = Math.max(most, ++running);
        try {
          await work(handlerMs, ctx.signal);
        } finally {
          running--;
        }
      });
      const results = await client.enqueueBatch(
        Array.from({ length: jobs }, (_, i) => ({ queue, name: "sleep", payload: { i }, jobId: `j${i}` })),
      );
      assert.ok(results.every((r) => r.ok));
      const done = w.run();
      // Sample the server's view while they run: never more than `concurrency` leased.
      let activeMost = 0;
      let completed = 0;
      while (completed < jobs) {
        const st = await client.queues.stats(queue);
        activeMost = Math.max(activeMost, st.active);
        completed = st.completed;
        await delay(20);
      }
      await w.close();
      await done;
      assert.equal(most, concurrency, `most handlers at once: ${most}`);
      assert.ok(activeMost <= concurrency, `active count seen: ${activeMost}`);
      assert.ok(activeMost > 0, "the sampler never saw a leased job");
      assert.equal(w.stats().maxRunning, concurrency);
      for (let i = 0; i < jobs; i++) {
        assert.equal(runs.get(`j${i}`), 1, `j${i} ran ${runs.get(`j${i}`)} times`);
        const j = await client.getJob(queue, `j${i}`);
        assert.equal(j.state, JobState.JOB_STATE_COMPLETED);
        assert.equal(j.attemptsMade, 1);
      }
    });
  },

  async long_handler_not_redelivered(s) {
    const handlerMs = param(s, "handler_ms");
    assert.ok(handlerMs >= 3 * param(s, "lease_ms"));
    await withServer(s, async (_server, client) => {
      const queue = uniqueQueue("long");
      let deliveries = 0;
      // A second worker on the queue would get the job if the lease expired.
      const w = worker(client, { queues: [queue], concurrency: 1 }).handle("long", async (_job, ctx) => {
        deliveries++;
        await work(handlerMs, ctx.signal);
      });
      const other = worker(client, { queues: [queue], concurrency: 1 }).handle("long", () => {
        deliveries++;
      });
      const done = w.run();
      await client.enqueue(queue, "long", {}, { jobId: "long-1", maxAttempts: 3 });
      await untilState(client, queue, "long-1", JobState.JOB_STATE_ACTIVE);
      const doneOther = other.run();
      const j = await untilState(client, queue, "long-1", JobState.JOB_STATE_COMPLETED, 20_000);
      await Promise.all([w.close(), other.close()]);
      await Promise.all([done, doneOther]);
      assert.equal(deliveries, 1);
      assert.equal(j.attemptsMade, 1);
      assert.equal(j.errors.length, 0);
      assert.equal(w.stats().settled, 1);
      // Kept by the stream's heartbeats, not rescued by a reconnect and ExtendLease.
      assert.equal(w.stats().streamsOpened, 1, "the stream was replaced");
      assert.equal(w.stats().extended, 0);
    });
  },

  async non_retryable_dead_letters(s) {
    const maxAttempts = param(s, "max_attempts");
    await withServer(s, async (_server, client) => {
      const queue = uniqueQueue("nonretry");
      const w = worker(client, { queues: [queue] }).handle("charge", () => {
        throw new NonRetryable("card declined: do not retry", { errorType: "card_declined" });
      });
      const done = w.run();
      await client.enqueue(queue, "charge", { amount: 5 }, { jobId: "nr-1", maxAttempts });
      const j = await untilState(client, queue, "nr-1", JobState.JOB_STATE_DEAD);
      await w.close();
      await done;
      assert.equal(j.attemptsMade, 1);
      assert.equal(j.deadReason, DeadReason.DEAD_REASON_NO_RETRY);
      assert.equal(j.errors.length, 1);
      assert.equal(j.errors[0]?.message, "card declined: do not retry");
      assert.equal(j.errors[0]?.errorType, "card_declined");
      assert.equal(j.errors[0]?.disposition, FailDisposition.FAIL_DISPOSITION_NO_RETRY);
      const dead = await client.deadLetters.list(queue);
      assert.deepEqual(
        dead.deadLetters.map((d) => d.jobId),
        ["nr-1"],
      );
    });
  },

  async retry_after_honoured(s) {
    const retryAfterMs = param(s, "retry_after_ms");
    const slackMs = param(s, "slack_ms");
    await withServer(s, async (_server, client) => {
      const queue = uniqueQueue("retryafter");
      const attempts: number[] = [];
      let secondLease: Date | undefined;
      const w = worker(client, { queues: [queue] }).handle("flaky", (job, ctx) => {
        attempts.push(ctx.attempt);
        if (ctx.attempt === 1) throw new RetryAfter(retryAfterMs, "upstream asked for a pause");
        secondLease = job.proto.leaseTime;
      });
      const done = w.run();
      await client.enqueue(queue, "flaky", {}, { jobId: "ra-1", maxAttempts: 3 });
      const j = await untilState(client, queue, "ra-1", JobState.JOB_STATE_COMPLETED);
      await w.close();
      await done;
      assert.deepEqual(attempts, [1, 2]);
      assert.equal(j.attemptsMade, 2);
      const fail = j.errors[0];
      assert.equal(fail?.disposition, FailDisposition.FAIL_DISPOSITION_RETRY);
      // Both times from the server's clock: the fail, then the second lease.
      const waited = between(fail.failTime, secondLease);
      assert.ok(waited >= retryAfterMs - slackMs, `leased again ${waited} ms after the fail (< ${retryAfterMs})`);
    });
  },

  async rate_limited_uses_no_attempt(s) {
    const limitedMs = param(s, "rate_limited_ms");
    const maxAttempts = param(s, "max_attempts");
    await withServer(s, async (_server, client) => {
      const queue = uniqueQueue("ratelimited");
      const attempts: number[] = [];
      const leaseTimes: Date[] = [];
      const w = worker(client, { queues: [queue] }).handle("call-api", (job, ctx) => {
        attempts.push(ctx.attempt);
        if (job.proto.leaseTime) leaseTimes.push(job.proto.leaseTime);
        if (attempts.length === 1) throw new RateLimited(limitedMs);
      });
      const done = w.run();
      await client.enqueue(queue, "call-api", {}, { jobId: "rl-1", maxAttempts });
      const j = await untilState(client, queue, "rl-1", JobState.JOB_STATE_COMPLETED);
      await w.close();
      await done;
      assert.deepEqual(attempts, [1, 1], "both deliveries are attempt 1");
      assert.equal(j.attemptsMade, 1);
      assert.equal(j.maxAttempts, maxAttempts);
      assert.equal(j.errors[0]?.disposition, FailDisposition.FAIL_DISPOSITION_RATE_LIMITED);
      const waited = between(j.errors[0]?.failTime, leaseTimes[1]);
      assert.ok(waited >= limitedMs - 1, `back after ${waited} ms (< ${limitedMs})`);
    });
  },
};
