/**
 * The channel's HTTP/2 keepalive (`keepalive` of ClientOptions) against a real jobwire through a
 * TCP proxy: a frozen path fails a call in flight within interval + timeout, the timeout
 * reaches the channel, and a client that pings every second is not cut off.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { Client, pb, status, type KeepaliveOptions } from "../src/index.js";
import { startJobwire, type JobwireServer } from "../src/testing/index.js";
import { startProxy } from "./fixtures/proxy.js";
import { delay, testLogger, uniqueQueue } from "./helpers.js";

describe("keepalive", () => {
  let server: JobwireServer;
  before(async () => (server = await startJobwire()));
  after(async () => server?.stop());

  /** Milliseconds a GetJob sent into a frozen path took to fail UNAVAILABLE (deadline 60 s). */
  async function frozenCall(keepalive: KeepaliveOptions): Promise<number> {
    const proxy = await startProxy(server.grpcPort);
    const client = new Client(proxy.target, { logger: testLogger, keepalive, timeoutMs: 60_000, retry: { attempts: 1 } });
    try {
      const queue = uniqueQueue("ka");
      await client.enqueue(queue, "k", {}, { jobId: "k" });
      assert.equal(proxy.freezeAll(), 1);
      const t0 = Date.now();
      await assert.rejects(client.getJob(queue, "k"), (e: { code?: number }) => e.code === status.UNAVAILABLE);
      return Date.now() - t0;
    } finally {
      client.close();
      await proxy.close();
    }
  }

  it("a frozen server fails the call within interval + timeout", async () => {
    const took = await frozenCall({ intervalMs: 1_000, timeoutMs: 1_000 });
    assert.ok(took < 8_000, `failed after ${took} ms`);
  });

  it("the keepalive timeout reaches the channel", async () => {
    // 1 s + 12 s: no sooner than the timeout (the default's 5 s would fail it sooner).
    const took = await frozenCall({ intervalMs: 1_000, timeoutMs: 12_000 });
    assert.ok(took >= 10_000 && took < 30_000, `failed after ${took} ms`);
  });

  it("a client that pings every second is not cut off", async () => {
    const proxy = await startProxy(server.grpcPort);
    const client = new Client(proxy.target, { logger: testLogger, keepalive: { intervalMs: 1_000, timeoutMs: 1_000 } });
    try {
      const queue = uniqueQueue("ka-ping");
      await client.enqueue(queue, "k", {}, { jobId: "k" });
      await delay(5_000); // idle: a PING a second, no call open
      const j = await client.getJob(queue, "k");
      assert.equal(j.state, pb.JobState.JOB_STATE_WAITING);
      assert.equal(proxy.connections, 1, "the server closed the pinging connection");
    } finally {
      client.close();
      await proxy.close();
    }
  });

  it("refuses a keepalive under 1 s", () => {
    assert.throws(() => new Client("127.0.0.1:1", { keepalive: { intervalMs: 500 } }), RangeError);
  });
});
