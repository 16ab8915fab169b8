/** The producer Client against a real jobwire: enqueue options, dedupe, batches, reads, admin wrappers. */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { Client, Worker, pb, status } from "../src/index.js";
import type { JobwireServer } from "../src/testing/index.js";
import { eventually, serverAndClient, testLogger, uniqueQueue } from "./helpers.js";

describe("Client", () => {
  let server: JobwireServer;
  let client: Client;
  before(async () => ({ server, client } = await serverAndClient()));
  after(async () => {
    client?.close();
    await server?.stop();
  });

  it("enqueues a JSON payload with every option and reads it back", async () => {
    const queue = uniqueQueue("opts");
    const { job, created } = await client.enqueue(queue, "send", { to: "a@example.com" }, {
      jobId: "j-1",
      delay: 60_000,
      priority: 7,
      maxAttempts: 4,
      backoff: { kind: "exponential", delayMs: 250, jitter: 0.5, maxDelayMs: 5_000 },
      metadata: { tenant: "t1" },
      timeout: 1_500,
    });
    assert.equal(created, true);
    assert.equal(job.jobId, "j-1");
    const got = await client.getJob(queue, "j-1");
    assert.equal(got.state, pb.JobState.JOB_STATE_DELAYED);
    assert.equal(got.contentType, "application/json");
    assert.deepEqual(JSON.parse(got.payload.toString()), { to: "a@example.com" });
    assert.equal(got.priority, 7);
    assert.equal(got.maxAttempts, 4);
    assert.deepEqual(got.metadata, { tenant: "t1" });
    assert.equal(got.backoff?.kind, pb.BackoffKind.BACKOFF_KIND_EXPONENTIAL);
    assert.deepEqual(got.backoff?.delay, { seconds: 0, nanos: 250_000_000 });
    assert.equal(got.backoff?.jitter, 0.5);
    assert.deepEqual(got.backoff?.maxDelay, { seconds: 5, nanos: 0 });
    assert.deepEqual(got.timeout, { seconds: 1, nanos: 500_000_000 });
    const wait = (got.readyTime?.getTime() ?? 0) - (got.createTime?.getTime() ?? 0);
    assert.ok(wait >= 59_000 && wait <= 61_000, `ready ${wait} ms after creation`);
  });

  it("dedupes by job id (created false, nothing changed) and keeps bytes and strings as sent", async () => {
    const queue = uniqueQueue("dedupe");
    const first = await client.enqueue(queue, "n", Buffer.from([0, 1, 2, 255]), { jobId: "same" });
    const second = await client.enqueue(queue, "n", "other", { jobId: "same" });
    assert.equal(first.created, true);
    assert.equal(second.created, false);
    assert.deepEqual([...second.job.payload], [0, 1, 2, 255]);
    assert.equal(second.job.contentType, "");
    const text = await client.enqueue(queue, "n", "héllo");
    assert.equal(text.job.payload.toString("utf8"), "héllo");
    assert.equal(text.job.contentType, "text/plain; charset=utf-8");
  });

  it("enqueues a batch with a result per item, a bad item refused on its own", async () => {
    const queue = uniqueQueue("batch");
    const results = await client.enqueueBatch([
      { queue, name: "a", payload: { i: 1 }, jobId: "b1" },
      { queue, name: "a", payload: { i: 2 }, priority: 5000 },
      { queue, name: "a", payload: { i: 3 }, jobId: "b1" },
    ]);
    assert.equal(results.length, 3);
    assert.ok(results[0]?.ok && results[0].created);
    assert.ok(results[1] && !results[1].ok);
    assert.equal(results[1].code, status.INVALID_ARGUMENT);
    assert.ok(results[2]?.ok && !results[2].created);
  });

  it("maps server refusals to grpc errors: NOT_FOUND, INVALID_ARGUMENT", async () => {
    await assert.rejects(client.getJob(uniqueQueue("none"), "nope"), (e: { code: status }) => e.code === status.NOT_FOUND);
    await assert.rejects(client.enqueue("bad queue!", "n", {}), (e: { code: status }) => e.code === status.INVALID_ARGUMENT);
  });

  it("wraps the queue service: stats, pause/resume, config, purge, list, delete", async () => {
    const queue = uniqueQueue("admin");
    await client.enqueue(queue, "n", {});
    await client.enqueue(queue, "n", {}, { delay: 60_000 });
    let stats = await client.queues.stats(queue);
    assert.equal(stats.waiting, 1);
    assert.equal(stats.delayed, 1);
    await client.queues.pause(queue);
    assert.equal((await client.queues.stats(queue)).paused, true);
    await client.queues.resume(queue);
    assert.equal((await client.queues.stats(queue)).paused, false);
    const cfg = await client.queues.updateConfig(queue, { defaultMaxAttempts: 3, maxActive: 10 }, ["default_max_attempts", "max_active"]);
    assert.equal(cfg.defaultMaxAttempts, 3);
    assert.equal((await client.queues.getConfig(queue)).maxActive, 10);
    assert.ok((await client.queues.list()).some((q) => q.queue === queue));
    assert.equal(await client.queues.purge(queue), 2);
    stats = await client.queues.stats(queue);
    assert.equal(stats.waiting + stats.delayed, 0);
    const del = await client.queues.delete(queue);
    assert.equal(del.waiting, 0);
  });

  it("lists a state's jobs page by page (listJobs) and the worker streams (listWorkers)", async () => {
    const queue = uniqueQueue("listing");
    for (const [jobId, priority] of [["a", 0], ["b", 0], ["hi", 5]] as const) {
      await client.enqueue(queue, "x", "payload", { jobId, priority });
    }
    // Lease order over two pages: the priority-5 job first, then FIFO; no payloads.
    const first = await client.listJobs(queue, pb.JobState.JOB_STATE_WAITING, { pageSize: 2 });
    assert.deepEqual(first.jobs.map((j) => j.jobId), ["hi", "a"]);
    assert.equal(first.jobs[0]?.payload.length, 0);
    const second = await client.listJobs(queue, pb.JobState.JOB_STATE_WAITING, { pageSize: 2, pageToken: first.nextPageToken });
    assert.deepEqual(second.jobs.map((j) => j.jobId), ["b"]);
    const named = await client.listJobs(queue, pb.JobState.JOB_STATE_WAITING, { filter: { name: "other" } });
    assert.equal(named.jobs.length, 0);
    await assert.rejects(
      client.listJobs(queue, pb.JobState.JOB_STATE_UNSPECIFIED),
      (e: { code: status }) => e.code === status.INVALID_ARGUMENT,
    );

    const idle = uniqueQueue("idle");
    const worker = new Worker(client, { queues: [idle], concurrency: 3, workerId: "node-lister", handleSignals: false, logger: testLogger }).handle(
      "x",
      () => undefined,
    );
    const running = worker.run();
    const stream = await eventually("the worker's stream listed", async () => (await client.listWorkers(idle)).streams[0]);
    assert.equal(stream.workerId, "node-lister");
    assert.deepEqual(stream.queues, [idle]);
    assert.equal(stream.credits, 3);
    assert.equal(stream.heldLeases, 0);
    assert.ok(stream.replicaId !== "" && stream.streamId.startsWith(`${stream.replicaId}/`));
    await worker.close();
    await running;
  });

  it("retries an idempotent call while the server is unreachable, then fails UNAVAILABLE", async () => {
    const dead = new Client("127.0.0.1:1", { retry: { attempts: 3, baseMs: 10, capMs: 20 }, timeoutMs: 2_000 });
    const t0 = Date.now();
    await assert.rejects(dead.getJob("q", "j"), (e: { code: status }) => e.code === status.UNAVAILABLE);
    assert.ok(Date.now() - t0 < 10_000);
    dead.close();
  });

  it("refuses to send a token in clear text beyond loopback", () => {
    assert.throws(() => new Client("example.com:50051", { token: "jw_x_y" }), /clear text/);
    new Client("127.0.0.1:50051", { token: "jw_x_y" }).close();
  });
});
