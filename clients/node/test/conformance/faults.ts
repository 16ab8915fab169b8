/**
 * The scenarios where something goes away: the worker's own process is told to stop
 * (SIGTERM), the server is killed and started again, the network cuts the stream.
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { pb } from "../../src/index.js";
import { startRedis } from "../../src/testing/index.js";
import { startProxy, type Proxy } from "../fixtures/proxy.js";
import { delay, eventually, uniqueQueue } from "../helpers.js";
import { param, untilState, withServer, work, worker, type ScenarioTest } from "./scenario.js";

const { JobState } = pb;
const here = dirname(fileURLToPath(import.meta.url));

export const faults: Record<string, ScenarioTest> = {
  async sigterm_drains(s) {
    const handlerMs = param(s, "handler_ms");
    const signalAfterMs = param(s, "signal_after_ms");
    await withServer(s, async (server, client) => {
      const queue = uniqueQueue("sigterm");
      const child = spawn(process.execPath, [join(here, "..", "fixtures", "sigterm-worker.js"), server.target, queue, String(handlerMs)], {
        stdio: ["ignore", "pipe", "pipe"],
      });
      let out = "";
      child.stdout.on("data", (d: Buffer) => (out += d.toString()));
      child.stderr.on("data", (d: Buffer) => (out += d.toString()));
      const exited = new Promise<number | null>((resolve) => child.on("exit", (code) => resolve(code)));
      try {
        await client.enqueue(queue, "slow", {}, { jobId: "held", maxAttempts: 3 });
        await eventually("the child started the job", () => (out.includes("started held") ? true : undefined));
        await delay(signalAfterMs);
        const signalled = Date.now();
        child.kill("SIGTERM");
        // The worker says it is draining once it has sent Drain on its stream.
        await eventually("the child drains", () => (out.includes("worker draining") ? true : undefined));
        // The child has a free credit (concurrency 2): only its Drain keeps the next job from it.
        // Drain is on the wire when the line is printed; a moment more lets the server read it.
        await delay(100);
        await client.enqueue(queue, "slow", {}, { jobId: "after", maxAttempts: 3 });
        const code = await exited;
        const took = Date.now() - signalled;
        assert.equal(code, 0, `the worker exited with ${code}:\n${out}`);
        assert.ok(took < 25_000, `exit ${took} ms after SIGTERM`);
        assert.ok(out.includes("done held"), out);
        assert.ok(!out.includes("started after"), `the job enqueued after the signal was leased:\n${out}`);
        const held = await client.getJob(queue, "held");
        assert.equal(held.state, JobState.JOB_STATE_COMPLETED);
        assert.equal(held.attemptsMade, 1);
        const after = await client.getJob(queue, "after");
        assert.equal(after.state, JobState.JOB_STATE_WAITING);
        assert.equal(after.attemptsMade, 0);
      } finally {
        if (child.exitCode === null) child.kill("SIGKILL");
      }
    });
  },

  async shutdown_hands_back_uncharged(s) {
    const graceMs = param(s, "grace_ms");
    const handlerMs = param(s, "handler_ms");
    const maxAttempts = param(s, "max_attempts");
    await withServer(s, async (_server, client) => {
      const queue = uniqueQueue("handback");
      const attempts: number[] = [];
      const first = worker(client, { queues: [queue], shutdownGraceMs: graceMs }).handle("slow", async (_job, ctx) => {
        attempts.push(ctx.attempt);
        await work(handlerMs, ctx.signal);
      });
      const firstRun = first.run();
      await client.enqueue(queue, "slow", {}, { jobId: "held", maxAttempts });
      await eventually("the handler runs", () => (attempts.length === 1 ? true : undefined));
      await first.close();
      await firstRun;
      const back = await client.getJob(queue, "held");
      assert.ok(
        [JobState.JOB_STATE_WAITING, JobState.JOB_STATE_ACTIVE].includes(back.state),
        `handed back: ${JobState[back.state]}`,
      );
      assert.equal(back.attemptsMade, 0, "no attempt charged");
      assert.deepEqual(back.errors, []);
      assert.deepEqual((await client.deadLetters.list(queue)).deadLetters, []);
      const second = worker(client, { queues: [queue] }).handle("slow", (_job, ctx) => {
        attempts.push(ctx.attempt);
      });
      const secondRun = second.run();
      const j = await untilState(client, queue, "held", JobState.JOB_STATE_COMPLETED);
      await second.close();
      await secondRun;
      assert.deepEqual(attempts, [1, 1], "run again as attempt 1");
      assert.equal(j.attemptsMade, 1);
      assert.equal(j.maxAttempts, maxAttempts);
    });
  },

  async server_restart_mid_run(s) {
    const jobs = param(s, "jobs");
    const concurrency = param(s, "concurrency");
    const handlerMs = param(s, "handler_ms");
    const downMs = param(s, "down_ms");
    const redis = await startRedis();
    try {
      await withServer(
        s,
        async (server, client) => {
          const queue = uniqueQueue("restart");
          const runs = new Map<string, number>();
          const w = worker(client, { queues: [queue], concurrency }).handle("slow", async (job, ctx) => {
            runs.set(job.id, (runs.get(job.id) ?? 0) + 1);
            if (job.id === "after") return;
            await work(handlerMs, ctx.signal);
            // On a slow machine the restart may outlast the handler; hold the job until the
            // worker has renewed its leases (or 10 s), so the acks cannot beat the renewals.
            const until = Date.now() + 10_000;
            while (w.stats().extended < jobs && Date.now() < until) await delay(20);
          });
          const done = w.run();
          for (let i = 0; i < jobs; i++) await client.enqueue(queue, "slow", {}, { jobId: `r${i}`, maxAttempts: 3 });
          await eventually("every job started", () => (runs.size === jobs ? true : undefined));
          await server.kill();
          await delay(downMs);
          await server.restart();
          for (let i = 0; i < jobs; i++) {
            const j = await untilState(client, queue, `r${i}`, JobState.JOB_STATE_COMPLETED);
            assert.equal(j.attemptsMade, 1, `r${i} attempts`);
            assert.equal(j.errors.length, 0);
          }
          // The worker is subscribed again (same worker id): a new job is leased and acked.
          await client.enqueue(queue, "slow", {}, { jobId: "after" });
          await untilState(client, queue, "after", JobState.JOB_STATE_COMPLETED);
          await w.close();
          await done;
          for (let i = 0; i < jobs; i++) assert.equal(runs.get(`r${i}`), 1, `r${i} ran ${runs.get(`r${i}`)} times`);
          const st = w.stats();
          assert.ok(st.extended >= jobs, `ExtendLease renewed ${st.extended} leases`);
          assert.ok(st.streamsOpened >= 2, `streams opened: ${st.streamsOpened}`);
          assert.equal(st.settled, jobs + 1);
          assert.equal(st.dropped, 0);
        },
        { redisUrl: redis.url },
      );
    } finally {
      await redis.stop();
    }
  },

  async stream_killed_by_network(s) {
    const handlerMs = param(s, "handler_ms");
    const cutAfterMs = param(s, "cut_after_ms");
    let proxy: Proxy | undefined;
    try {
      await withServer(
        s,
        async (_server, client) => {
          const queue = uniqueQueue("netcut");
          let deliveries = 0;
          let reconnectedWhileRunning = false;
          // Concurrency 2: a slot is free, so the stream is replaced while the job runs.
          const w = worker(client, { queues: [queue], concurrency: 2 }).handle("slow", async (_job, ctx) => {
            deliveries++;
            await work(handlerMs, ctx.signal);
            reconnectedWhileRunning = w.stats().streamsOpened >= 2;
          });
          const done = w.run();
          await client.enqueue(queue, "slow", {}, { jobId: "cut-1", maxAttempts: 3 });
          await eventually("the job started", () => (deliveries === 1 ? true : undefined));
          await delay(cutAfterMs);
          assert.ok((proxy?.cutAll() ?? 0) >= 1, "no connection to cut");
          const j = await untilState(client, queue, "cut-1", JobState.JOB_STATE_COMPLETED);
          await w.close();
          await done;
          assert.equal(deliveries, 1);
          assert.equal(j.attemptsMade, 1);
          assert.equal(j.errors.length, 0);
          assert.ok(reconnectedWhileRunning, "the stream was not replaced while the job ran");
          const st = w.stats();
          assert.ok(st.extended >= 1, "the lease was not renewed with ExtendLease");
          assert.equal(st.settled, 1);
          assert.equal(st.dropped, 0);
        },
        {},
        async (server) => {
          proxy = await startProxy(server.grpcPort);
          return proxy.target;
        },
      );
    } finally {
      await proxy?.close();
    }
  },
};
