/**
 * Job control (issue 16) against a real jobwire: a revoked lease, settling after a cancel,
 * cancelJobs paging and signalling, deleteJob and cancelJob edge cases, and the README's
 * job-control example.
 */
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { setTimeout as sleep } from "node:timers/promises";
import { promisify } from "node:util";
import { after, before, describe, it } from "node:test";
import { Client, LeaseLost, msToDuration, pb, status, Worker } from "../src/index.js";
import type { JobwireServer } from "../src/testing/index.js";
import { eventually, serverAndClient, testLogger, uniqueQueue } from "./helpers.js";
import { untilState } from "./conformance/scenario.js";

const { JobState } = pb;

describe("job control against a server", () => {
  let server: JobwireServer;
  let client: Client;
  before(async () => ({ server, client } = await serverAndClient()));
  after(async () => {
    client?.close();
    await server?.stop();
  });

  const newWorker = (queue: string, concurrency = 1): Worker =>
    new Worker(client, { queues: [queue], concurrency, handleSignals: false, logger: testLogger });

  it("a revoked lease rejects reports with LeaseLost and drops the result", async () => {
    const queue = uniqueQueue("revoked");
    await client.enqueue(queue, "reports", {}, { jobId: "r", maxAttempts: 3, delay: 500 });
    await client.queues.updateConfig(queue, { cancelGrace: msToDuration(0) }, ["cancel_grace"]);
    const raised: unknown[] = [];
    let started = false;
    const w = newWorker(queue).handle("reports", async (_j, ctx) => {
      await ctx.progress(5, "fine");
      started = true;
      // Ignores the cancel and keeps reporting; the lease is revoked at once (cancel_grace 0).
      for (let i = 0; i < 100; i++) {
        try {
          await ctx.progress(6);
        } catch (e) {
          raised.push(e);
          break;
        }
        await new Promise((r) => setTimeout(r, 50));
      }
      ctx.setResult("dropped");
    });
    const done = w.run();
    await eventually("the handler running", () => (started ? true : undefined));
    await client.cancelJob(queue, "r");
    const job = await untilState(client, queue, "r", JobState.JOB_STATE_CANCELLED);
    await eventually("the result dropped", () => (w.stats().dropped === 1 ? true : undefined), 10_000);
    await w.close();
    await done;
    assert.equal(raised.length, 1);
    assert.ok(raised[0] instanceof LeaseLost, String(raised[0]));
    assert.equal(job.progressMessage, "fine");
    assert.equal(job.result.length, 0);
  });

  it("after a cancel, a handler that stops ends CANCELLED ('cancelled'), one that finishes anyway COMPLETED", async () => {
    const queue = uniqueQueue("after-cancel");
    const ids = ["throws", "aborted", "finishes"];
    const started = new Set<string>();
    const reasons: (string | undefined)[] = [];
    const aborted = (signal: AbortSignal) =>
      new Promise<void>((resolve) => (signal.aborted ? resolve() : signal.addEventListener("abort", () => resolve())));
    const w = newWorker(queue, 3)
      .handle("throws", async (job, ctx) => {
        started.add(job.id);
        await aborted(ctx.signal);
        reasons.push(ctx.cancelReason);
        ctx.signal.throwIfAborted(); // the JobCancelled
      })
      .handle("aborted", async (job, ctx) => {
        started.add(job.id);
        await sleep(10_000, undefined, { signal: ctx.signal }); // rejects with an AbortError
      })
      .handle("finishes", async (job, ctx) => {
        started.add(job.id);
        await aborted(ctx.signal);
        reasons.push(ctx.cancelReason);
        await sleep(50); // still works after the cancel
        ctx.setResult("finished anyway");
      });
    for (const id of ids) await client.enqueue(queue, id, {}, { jobId: id, maxAttempts: 3 });
    const done = w.run();
    await eventually("the handlers running", () => (started.size === 3 ? true : undefined), 15_000);
    for (const id of ids) assert.ok((await client.cancelJob(queue, id, "too slow")).cancelled);
    const throws = await untilState(client, queue, "throws", JobState.JOB_STATE_CANCELLED);
    const abortedJob = await untilState(client, queue, "aborted", JobState.JOB_STATE_CANCELLED);
    const finishes = await untilState(client, queue, "finishes", JobState.JOB_STATE_COMPLETED);
    await sleep(300); // a second run would start within this
    await w.close();
    await done;
    assert.deepEqual(reasons, ["too slow", "too slow"]);
    for (const j of [throws, abortedJob]) {
      assert.equal(j.attemptsMade, 1);
      assert.equal(j.cancelReason, "too slow");
      assert.deepEqual(
        j.errors.map((e) => [e.errorType, e.message]),
        [["cancelled", "cancelled: too slow"]],
      );
    }
    assert.equal(finishes.attemptsMade, 1);
    assert.equal(finishes.result.toString(), "finished anyway");
    assert.equal(finishes.errors.length, 0);
    assert.equal(w.stats().settled, 3);
  });

  it("cancelJobs pages and signals active jobs; deleteJob refuses an active job", async () => {
    const queue = uniqueQueue("cancel-jobs");
    let started = false;
    const w = newWorker(queue).handle("report", async (job, ctx) => {
      if (job.id !== "active") return;
      started = true;
      await new Promise<void>((resolve) => ctx.signal.addEventListener("abort", () => resolve()));
      ctx.signal.throwIfAborted(); // stops: the job ends CANCELLED
    });
    await client.enqueue(queue, "report", {}, { jobId: "active", metadata: { tenant: "t1" } });
    const done = w.run();
    await eventually("the handler running", () => (started ? true : undefined));
    await assert.rejects(client.deleteJob(queue, "active"), (e: { code?: number }) => e.code === status.FAILED_PRECONDITION);
    for (let i = 0; i < 3; i++) await client.enqueue(queue, "report", {}, { jobId: `w${i}`, metadata: { tenant: "t1" } });
    await client.enqueue(queue, "report", {}, { jobId: "other", metadata: { tenant: "t2" } });
    const filter = { metadataKey: "tenant", metadataValue: "t1" };
    const first = await client.cancelJobsPage(queue, filter, { limit: 1 });
    assert.equal(first.cancelled + first.signalled, 1);
    assert.notEqual(first.nextPageToken, "");
    const rest = await client.cancelJobs(queue, filter, { reason: "t1 left" });
    assert.equal(first.cancelled + rest.cancelled, 3);
    assert.equal(first.signalled + rest.signalled, 1);
    await untilState(client, queue, "active", JobState.JOB_STATE_CANCELLED);
    const other = await client.getJob(queue, "other"); // leased once the slot freed, maybe
    assert.notEqual(other.state, JobState.JOB_STATE_CANCELLED);
    assert.equal(other.cancelTime, undefined);
    await w.close();
    await done;
    const { job, cancelled } = await client.cancelJob(queue, "active", "again");
    assert.equal(cancelled, false);
    assert.equal(job.state, JobState.JOB_STATE_CANCELLED);
    await assert.rejects(client.cancelJob(queue, "nope"), (e: { code?: number }) => e.code === status.NOT_FOUND);
  });

  it("the README's job-control example (examples/job-control.ts) runs", async () => {
    const example = join(dirname(fileURLToPath(import.meta.url)), "..", "examples", "job-control.js");
    const env = { ...process.env, JOBWIRE_TARGET: server.target, JOBWIRE_LOG_LEVEL: "warn" };
    const { stdout } = await promisify(execFile)(process.execPath, [example], { env });
    assert.match(stdout, /export:7 JOB_STATE_CANCELLED \(cancelled: true\)/);
    assert.match(stdout, /cancelled 1, signalled 0/);
    const digest = await client.getJob("exports", "digest:7");
    assert.equal(digest.state, JobState.JOB_STATE_CANCELLED);
    assert.ok(digest.expireTime);
  });

});
