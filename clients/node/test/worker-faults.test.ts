/**
 * The Worker when things go wrong, against a real jobwire: the shutdown grace runs out, a
 * lease is lost while the stream is down, the server drains and comes back.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { Client, pb } from "../src/index.js";
import { startJobwire, startRedis } from "../src/testing/index.js";
import { work, worker as newWorker, untilState } from "./conformance/scenario.js";
import { startProxy } from "./fixtures/proxy.js";
import { eventually, testLogger, uniqueQueue } from "./helpers.js";

const { JobState } = pb;

describe("Worker faults", () => {
  it("past the grace, aborts the handler's signal and hands the job back uncharged", async () => {
    const server = await startJobwire();
    const client = new Client(server.target, { logger: testLogger });
    try {
      const queue = uniqueQueue("grace");
      let aborted = false;
      let started = false;
      const w = newWorker(client, { queues: [queue], shutdownGraceMs: 300 }).handle("stuck", async (_job, ctx) => {
        started = true;
        // A handler that ignores the signal must not hold shutdown up either.
        ctx.signal.addEventListener("abort", () => (aborted = true));
        await new Promise((r) => setTimeout(r, 3_000));
      });
      const done = w.run();
      await client.enqueue(queue, "stuck", {}, { jobId: "g-1", maxAttempts: 3, backoff: { kind: "fixed", delayMs: 60_000 } });
      await eventually("the handler started", () => (started ? true : undefined));
      const t0 = Date.now();
      await w.close();
      await done;
      assert.ok(Date.now() - t0 < 2_500, `close took ${Date.now() - t0} ms`);
      assert.ok(aborted, "the handler's signal was not aborted");
      const j = await client.getJob(queue, "g-1");
      // RELEASE: waiting again at once (the job's 60 s backoff does not apply), uncharged.
      assert.equal(j.state, JobState.JOB_STATE_WAITING);
      assert.equal(j.attemptsMade, 0);
      assert.deepEqual(j.errors, []);
    } finally {
      client.close();
      await server.stop();
    }
  });

  it("a lease lost while the stream is down: the handler is signalled and its result dropped, the job runs elsewhere", async () => {
    const server = await startJobwire({ args: ["--lease-duration", "1s"] });
    const proxy = await startProxy(server.grpcPort);
    const viaProxy = new Client(proxy.target, { logger: testLogger });
    const direct = new Client(server.target, { logger: testLogger });
    try {
      const queue = uniqueQueue("lost");
      let aSignalled = false;
      let aStarted = false;
      const a = newWorker(viaProxy, { queues: [queue] }).handle("slow", async (_job, ctx) => {
        aStarted = true;
        try {
          await work(4_000, ctx.signal);
        } catch (e) {
          aSignalled = true;
          throw e;
        }
      });
      const b = newWorker(direct, { queues: [queue] }).handle("slow", () => undefined);
      const doneA = a.run();
      await direct.enqueue(queue, "slow", {}, { jobId: "l-1", maxAttempts: 3 });
      await eventually("a started", () => (aStarted ? true : undefined));
      const doneB = b.run();
      // A's stream goes, and A cannot reach the server until its lease has expired.
      proxy.blocked = true;
      proxy.cutAll();
      const j = await untilState(direct, queue, "l-1", JobState.JOB_STATE_COMPLETED, 30_000);
      proxy.blocked = false;
      await eventually("a's result dropped", () => (a.stats().dropped === 1 ? true : undefined));
      await Promise.all([a.close(), b.close()]);
      await Promise.all([doneA, doneB]);
      assert.ok(aSignalled, "a's handler was not signalled");
      assert.equal(a.stats().settled, 0);
      assert.equal(b.stats().settled, 1);
      assert.equal(j.attemptsMade, 2);
      assert.equal(j.errors[0]?.errorType, "LEASE_EXPIRED");
    } finally {
      viaProxy.close();
      direct.close();
      await proxy.close();
      await server.stop();
    }
  });

  it("after a reconnect, opens with the free slots only and grants a credit when a carried lease settles", async () => {
    const server = await startJobwire({ args: ["--lease-duration", "10s"] });
    const proxy = await startProxy(server.grpcPort);
    const client = new Client(proxy.target, { logger: testLogger });
    try {
      const queue = uniqueQueue("credits");
      const spans = new Map<string, [number, number]>();
      const w = newWorker(client, { queues: [queue], concurrency: 2 }).handle("job", async (job, ctx) => {
        const start = Date.now();
        await work(job.id === "a" ? 2_000 : 3_000, ctx.signal);
        spans.set(job.id, [start, Date.now()]);
      });
      const done = w.run();
      await client.enqueue(queue, "job", {}, { jobId: "a" });
      await eventually("a leased", () => (w.stats().leased === 1 ? true : undefined));
      proxy.cutAll();
      await eventually("a new stream", () => (w.stats().streamsOpened >= 2 ? true : undefined));
      await client.enqueue(queue, "job", {}, { jobId: "b" });
      await client.enqueue(queue, "job", {}, { jobId: "c" });
      await eventually("all done", () => (spans.size === 3 ? true : undefined), 20_000);
      await w.close();
      await done;
      // One slot was free on the new stream: b or c waited for a; a's settle granted the slot
      // back, so the second of them ran alongside the first instead of after it.
      assert.equal(w.stats().maxRunning, 2);
      const [b, c] = [spans.get("b"), spans.get("c")];
      assert.ok(spans.get("a") && b && c);
      const [first, second] = b[0] <= c[0] ? [b, c] : [c, b];
      assert.ok(second[0] >= (spans.get("a")?.[1] ?? 0) - 50, "the second job started before a finished (more leases than slots)");
      assert.ok(second[0] < first[1], "the second job waited for the first: no credit came back for a");
    } finally {
      client.close();
      await proxy.close();
      await server.stop();
    }
  });

  it("a connection that goes silent is found by keepalive, replaced, and the lease kept", async () => {
    const server = await startJobwire({ args: ["--lease-duration", "10s"] });
    const proxy = await startProxy(server.grpcPort);
    // Keepalive as low as a test can afford (the default is 20 s + 10 s).
    const client = new Client(proxy.target, {
      logger: testLogger,
      channelOptions: { "grpc.keepalive_time_ms": 1_000, "grpc.keepalive_timeout_ms": 1_000 },
    });
    try {
      const queue = uniqueQueue("silent");
      let deliveries = 0;
      let replacedWhileRunning = false;
      const w = newWorker(client, { queues: [queue], concurrency: 2 }).handle("slow", async (_job, ctx) => {
        deliveries++;
        await work(4_000, ctx.signal);
        replacedWhileRunning = w.stats().streamsOpened >= 2;
      });
      const done = w.run();
      await client.enqueue(queue, "slow", {}, { jobId: "s-1", maxAttempts: 3 });
      await eventually("the job started", () => (deliveries === 1 ? true : undefined));
      assert.ok(proxy.freezeAll() >= 1);
      const j = await untilState(client, queue, "s-1", JobState.JOB_STATE_COMPLETED, 20_000);
      await w.close();
      await done;
      assert.equal(deliveries, 1);
      assert.equal(j.attemptsMade, 1);
      assert.ok(replacedWhileRunning, "the stream was not replaced while the job ran");
      assert.ok(w.stats().extended >= 1, "the lease was not renewed");
      assert.equal(w.stats().dropped, 0);
    } finally {
      client.close();
      await proxy.close();
      await server.stop();
    }
  });

  it("finishes its job when the server drains, then reconnects to the server's next run", async () => {
    const redis = await startRedis();
    const server = await startJobwire({ redisUrl: redis.url, args: ["--shutdown-grace", "10s"] });
    const client = new Client(server.target, { logger: testLogger });
    try {
      const queue = uniqueQueue("drain");
      let started = 0;
      const w = newWorker(client, { queues: [queue], concurrency: 2 }).handle("job", async (job, ctx) => {
        started++;
        if (job.id === "d-1") await work(1_000, ctx.signal);
      });
      const done = w.run();
      await client.enqueue(queue, "job", {}, { jobId: "d-1", maxAttempts: 3 });
      await eventually("d-1 started", () => (started === 1 ? true : undefined));
      server.process.kill("SIGTERM");
      await new Promise((r) => server.process.once("exit", r));
      await server.restart();
      const j = await client.getJob(queue, "d-1");
      assert.equal(j.state, JobState.JOB_STATE_COMPLETED, "the held job was not acked during the server's drain");
      assert.equal(j.attemptsMade, 1);
      await client.enqueue(queue, "job", {}, { jobId: "d-2" });
      await untilState(client, queue, "d-2", JobState.JOB_STATE_COMPLETED);
      await w.close();
      await done;
      assert.ok(w.stats().streamsOpened >= 2);
      assert.equal(w.stats().settled, 2);
      assert.equal(w.stats().dropped, 0);
    } finally {
      client.close();
      await server.stop();
      await redis.stop();
    }
  });
});
