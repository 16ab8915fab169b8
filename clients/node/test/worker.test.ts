/** The Worker against a real jobwire: handlers per name, acks, typed errors end to end, close(). */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { Client, NonRetryable, pb, Worker } from "../src/index.js";
import type { JobwireServer } from "../src/testing/index.js";
import { eventually, serverAndClient, testLogger, uniqueQueue } from "./helpers.js";

describe("Worker", () => {
  let server: JobwireServer;
  let client: Client;
  before(async () => ({ server, client } = await serverAndClient()));
  after(async () => {
    client?.close();
    await server?.stop();
  });

  it("runs the handler registered for each job name and acks", async () => {
    const queue = uniqueQueue("basic");
    const seen: string[] = [];
    const worker = new Worker(client, { queues: [queue], concurrency: 2, handleSignals: false, logger: testLogger })
      .handle<{ n: number }>("a", (job, ctx) => {
        assert.ok(ctx.idempotencyKey !== "");
        assert.equal(ctx.attempt, 1);
        seen.push(`a${job.payload.n}`);
      })
      .handle<string>("b", (job) => {
        seen.push(`b:${job.payload}`);
      });
    const running = worker.run();
    await client.enqueue(queue, "a", { n: 1 }, { jobId: "1" });
    await client.enqueue(queue, "b", "text", { jobId: "2" });
    for (const id of ["1", "2"]) {
      await eventually(`${id} completed`, async () =>
        (await client.getJob(queue, id)).state === pb.JobState.JOB_STATE_COMPLETED ? true : undefined,
      );
    }
    await worker.close();
    await running;
    assert.deepEqual(seen.sort(), ["a1", "b:text"]);
    assert.equal(worker.stats().settled, 2);
    assert.equal(worker.stats().held, 0);
  });

  it("fails a job with no handler as RETRY (no_handler), and a NonRetryable straight to the dead letters", async () => {
    const queue = uniqueQueue("errors");
    const worker = new Worker(client, { queues: [queue], handleSignals: false, logger: testLogger }).handle("bad", () => {
      throw new NonRetryable("permanent", { errorType: "invalid_address" });
    });
    const running = worker.run();
    await client.enqueue(queue, "unknown", {}, { jobId: "u", maxAttempts: 1 });
    await client.enqueue(queue, "bad", {}, { jobId: "b", maxAttempts: 5 });
    const u = await eventually("u dead", async () => {
      const j = await client.getJob(queue, "u");
      return j.state === pb.JobState.JOB_STATE_DEAD ? j : undefined;
    });
    assert.equal(u.errors[0]?.errorType, "no_handler");
    assert.equal(u.errors[0]?.disposition, pb.FailDisposition.FAIL_DISPOSITION_RETRY);
    const b = await eventually("b dead", async () => {
      const j = await client.getJob(queue, "b");
      return j.state === pb.JobState.JOB_STATE_DEAD ? j : undefined;
    });
    assert.equal(b.attemptsMade, 1);
    assert.equal(b.deadReason, pb.DeadReason.DEAD_REASON_NO_RETRY);
    assert.equal(b.errors[0]?.workerId, worker.workerId);
    await worker.close();
    await running;
  });

  it("rejects run() when the server refuses the stream's open (a bad queue name)", async () => {
    const w = new Worker(client, { queues: ["not a queue!"], handleSignals: false, logger: testLogger }).handle("x", () => undefined);
    await assert.rejects(w.run(), /refused the worker's stream/);
    assert.equal(w.stats().streamsOpened, 0);
  });

  it("logs through a pino-shaped logger: (fields, message)", async () => {
    const lines: [string, object, string][] = [];
    const at = (level: string) => (fields: object, msg: string) => lines.push([level, fields, msg]);
    const logger = { debug: at("debug"), info: at("info"), warn: at("warn"), error: at("error") };
    const queue = uniqueQueue("logs");
    const w = new Worker(client, { queues: [queue], handleSignals: false, logger, workerId: "logged" }).handle("x", () => {
      throw new TypeError("boom");
    });
    const done = w.run();
    await client.enqueue(queue, "x", {}, { jobId: "x1" });
    await eventually("x1 failed", async () => ((await client.getJob(queue, "x1")).state === pb.JobState.JOB_STATE_DEAD ? true : undefined));
    await w.close();
    await done;
    assert.ok(lines.some(([l, f, m]) => l === "info" && m === "worker started" && (f as { workerId?: string }).workerId === "logged"));
    const failed = lines.find(([l, , m]) => l === "warn" && m === "job attempt failed");
    assert.ok(failed, JSON.stringify(lines));
    assert.equal((failed[1] as { errorType?: string }).errorType, "TypeError");
    assert.ok(lines.some(([l, , m]) => l === "info" && m === "worker stopped"));
  });

  it("refuses a shutdown grace of 0 and a concurrency out of range", () => {
    assert.throws(() => new Worker(client, { queues: ["q"], shutdownGraceMs: 0 }), /grace/);
    assert.throws(() => new Worker(client, { queues: ["q"], concurrency: 0 }), /concurrency/);
  });
});
