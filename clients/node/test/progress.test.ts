/**
 * Progress, checkpoints and results (issue 16) against a real jobwire: reports the server
 * refuses, a result over the server's limit, and a report left unanswered by a stream that
 * went silent (sent again with the unary ReportProgress).
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { Client, pb, ReportRefused, status, Worker } from "../src/index.js";
import type { JobwireServer } from "../src/testing/index.js";
import { startProxy } from "./fixtures/proxy.js";
import { eventually, serverAndClient, testLogger, uniqueQueue } from "./helpers.js";
import { untilState } from "./conformance/scenario.js";

const { JobState } = pb;

describe("progress, checkpoints and results against a server", () => {
  let server: JobwireServer;
  let client: Client;
  before(async () => ({ server, client } = await serverAndClient()));
  after(async () => {
    client?.close();
    await server?.stop();
  });

  const newWorker = (queue: string): Worker => new Worker(client, { queues: [queue], handleSignals: false, logger: testLogger });

  it("refused reports reject with ReportRefused and save nothing", async () => {
    const queue = uniqueQueue("reports");
    const raised: unknown[] = [];
    const w = newWorker(queue).handle("reports", async (_j, ctx) => {
      await ctx.progress(5, "x".repeat(300)).catch((e: unknown) => raised.push(e));
      await ctx.saveCheckpoint(Buffer.alloc(64 * 1024 + 1)).catch((e: unknown) => raised.push(e));
      await ctx.progress(7, "fine");
    });
    await client.enqueue(queue, "reports", {}, { jobId: "r" });
    const done = w.run();
    const job = await untilState(client, queue, "r", JobState.JOB_STATE_COMPLETED);
    await w.close();
    await done;
    const [first, second] = raised;
    assert.ok(first instanceof ReportRefused && first.code === Number(status.INVALID_ARGUMENT), String(first));
    assert.ok(second instanceof ReportRefused && second.code === Number(status.RESOURCE_EXHAUSTED), String(second));
    assert.equal(job.progress, 7);
    assert.equal(job.progressMessage, "fine");
    assert.equal(job.checkpoint.length, 0);
  });

  it("a result over the server's limit dead-letters the job (result_too_large) instead of leaving it leased", async () => {
    const queue = uniqueQueue("big-result");
    const w = newWorker(queue).handle("big", (_j, ctx) => ctx.setResult(Buffer.alloc(64 * 1024 + 1)));
    await client.enqueue(queue, "big", {}, { jobId: "big", maxAttempts: 3 });
    const done = w.run();
    const job = await untilState(client, queue, "big", JobState.JOB_STATE_DEAD);
    await w.close();
    await done;
    assert.equal(job.attemptsMade, 1);
    assert.equal(job.errors[job.errors.length - 1]?.errorType, "result_too_large");
    assert.equal(job.result.length, 0);
  });

  it("a report the stream left unanswered (a silent connection) goes through ReportProgress", async () => {
    const proxy = await startProxy(server.grpcPort);
    const viaProxy = new Client(proxy.target, {
      logger: testLogger,
      channelOptions: { "grpc.keepalive_time_ms": 1_000, "grpc.keepalive_timeout_ms": 1_000 },
    });
    try {
      const queue = uniqueQueue("frozen");
      let started = false;
      let go: () => void = () => undefined;
      const gate = new Promise<void>((r) => (go = r));
      let reported = false;
      const w = new Worker(viaProxy, { queues: [queue], handleSignals: false, logger: testLogger }).handle("frozen", async (_j, ctx) => {
        started = true;
        await gate;
        await ctx.progress(50, "sent into a frozen stream"); // answered through the unary call
        reported = true;
      });
      await client.enqueue(queue, "frozen", {}, { jobId: "f" });
      const done = w.run();
      await eventually("the handler running", () => (started ? true : undefined));
      assert.ok(proxy.freezeAll() >= 1); // the stream's connection goes silent (no reset)
      go();
      await eventually("the report answered", () => (reported ? true : undefined), 30_000);
      const job = await untilState(client, queue, "f", JobState.JOB_STATE_COMPLETED);
      await w.close();
      await done;
      assert.equal(job.progress, 50);
      assert.equal(job.progressMessage, "sent into a frozen stream");
    } finally {
      viaProxy.close();
      await proxy.close();
    }
  });
});
