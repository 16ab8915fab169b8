/** The error mapping and the fake-lease helper (no server): what each thrown value becomes. */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { fullJitter, msToDuration, NonRetryable, RateLimited, RetryAfter, type Job } from "../src/index.js";
import { runHandler } from "../src/testing/index.js";

describe("runHandler (fake lease) and the error mapping", () => {
  it("acks a handler that resolves, with the payload decoded and the context filled", async () => {
    let seen: { job: Job<{ n: number }>; attempt: number; key: string; meta: Record<string, string> } | undefined;
    const r = await runHandler<{ n: number }>(
      (job, ctx) => {
        seen = { job, attempt: ctx.attempt, key: ctx.idempotencyKey, meta: ctx.metadata };
      },
      { payload: { n: 3 }, attempt: 2, idempotencyKey: "k", metadata: { a: "b" } },
    );
    assert.deepEqual(r, { outcome: "ack", result: undefined, reports: [] });
    assert.equal(seen?.job.payload.n, 3);
    assert.equal(seen?.attempt, 2);
    assert.equal(seen?.key, "k");
    assert.deepEqual(seen?.meta, { a: "b" });
  });

  it("NonRetryable -> NO_RETRY with its error type and message", async () => {
    const r = await runHandler(() => {
      throw new NonRetryable("400 invalid address", { errorType: "invalid_address" });
    });
    assert.equal(r.outcome, "fail");
    assert.ok(r.outcome === "fail");
    assert.equal(r.disposition, "NO_RETRY");
    assert.equal(r.error.errorType, "invalid_address");
    assert.equal(r.error.message, "400 invalid address");
  });

  it("RetryAfter -> RETRY with retry_after; RateLimited -> RATE_LIMITED with pause_queue", async () => {
    const a = await runHandler(async () => {
      await Promise.resolve();
      throw new RetryAfter(1500);
    });
    assert.ok(a.outcome === "fail");
    assert.equal(a.disposition, "RETRY");
    assert.equal(a.retryAfterMs, 1500);
    const b = await runHandler(() => {
      throw new RateLimited(300, { pauseQueue: true });
    });
    assert.ok(b.outcome === "fail");
    assert.equal(b.disposition, "RATE_LIMITED");
    assert.equal(b.retryAfterMs, 300);
    assert.equal(b.pauseQueue, true);
  });

  it("NonRetryable, RetryAfter and RateLimited record their class name as error_type unless given one", async () => {
    const types: string[] = [];
    for (const err of [new NonRetryable("n"), new RetryAfter(10), new RateLimited(10)]) {
      const r = await runHandler(() => {
        throw err;
      });
      assert.ok(r.outcome === "fail");
      types.push(r.error.errorType);
    }
    assert.deepEqual(types, ["NonRetryable", "RetryAfter", "RateLimited"]);
    const given = await runHandler(() => {
      throw new RetryAfter(10, "busy", { errorType: "provider_busy" });
    });
    assert.ok(given.outcome === "fail");
    assert.equal(given.error.errorType, "provider_busy");
  });

  it("any other error -> RETRY with its type name, message and a stack cut to 8 KiB", async () => {
    const r = await runHandler(() => {
      const e = new TypeError("x".repeat(20_000));
      e.stack = "TypeError: boom\n" + "    at frame (file.js:1:1)\n".repeat(2_000);
      throw e;
    });
    assert.ok(r.outcome === "fail");
    assert.equal(r.disposition, "RETRY");
    assert.equal(r.error.errorType, "TypeError");
    assert.ok(Buffer.byteLength(r.error.details) <= 8 * 1024);
    assert.ok(r.error.details.startsWith("TypeError: boom"));
    assert.ok(Buffer.byteLength(r.error.message) <= 8 * 1024);
    const s = await runHandler(() => {
      // eslint-disable-next-line @typescript-eslint/only-throw-error -- a non-Error throw is what is tested
      throw "a string";
    });
    assert.ok(s.outcome === "fail");
    assert.equal(s.error.errorType, "string");
    assert.equal(s.error.message, "a string");
  });

  it("a payload that is not valid JSON is NonRetryable (it can never parse)", async () => {
    const r = await runHandler(() => undefined, { payload: Buffer.from("{nope"), contentType: "application/json" });
    assert.ok(r.outcome === "fail");
    assert.equal(r.disposition, "NO_RETRY");
    assert.equal(r.error.errorType, "InvalidPayload");
  });

  it("full jitter stays in [0, min(cap, base * 2^n)]; durations convert exactly", () => {
    assert.equal(fullJitter(0, {}, () => 1), 500);
    assert.equal(fullJitter(3, {}, () => 1), 4000);
    assert.equal(fullJitter(20, {}, () => 1), 30_000);
    assert.equal(fullJitter(5, {}, () => 0), 0);
    assert.deepEqual(msToDuration(1500.5), { seconds: 1, nanos: 500_500_000 });
    assert.throws(() => msToDuration(-1));
  });
});
