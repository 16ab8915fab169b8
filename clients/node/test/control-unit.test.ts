/**
 * Job control (issue 16) in the SDK without a server (runHandler): results, progress reports
 * and checkpoints, RateLimited pauseGroup, JobCancelled, the report errors, and the enqueue
 * options groupKey / expireAt / ttl.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import { failureOf, jobSpec, JobCancelled, LeaseLost, pb, RateLimited, ReportRefused } from "../src/index.js";
import { reportError } from "../src/errors.js";
import { runHandler } from "../src/testing/index.js";

const { FailDisposition } = pb;

describe("job control without a server", () => {
  it("ctx.setResult is the ack's result (bytes, a string as UTF-8, anything else as JSON)", async () => {
    const str = await runHandler((_j, ctx) => ctx.setResult("done:42"));
    assert.ok(str.outcome === "ack");
    assert.equal(str.result?.toString(), "done:42");
    const json = await runHandler((_j, ctx) => ctx.setResult({ rows: 3 }));
    assert.ok(json.outcome === "ack");
    assert.equal(json.result?.toString(), '{"rows":3}');
    const none = await runHandler(() => "a returned value is not a result");
    assert.ok(none.outcome === "ack");
    assert.equal(none.result, undefined);
  });

  it("reports are recorded in order and ctx.checkpoint follows the saved one", async () => {
    const seen: string[] = [];
    const r = await runHandler(
      async (_j, ctx) => {
        seen.push(ctx.checkpoint.toString());
        await ctx.progress(10, "started");
        await ctx.saveCheckpoint({ page: 2 }, { progress: 40 });
        seen.push(ctx.checkpoint.toString());
        await ctx.report({ message: "only the message" });
      },
      { checkpoint: Buffer.from("page=1"), groupKey: "tenant-a" },
    );
    assert.deepEqual(seen, ["page=1", '{"page":2}']);
    assert.equal(r.reports.length, 3);
    const [a, b, c] = r.reports;
    assert.deepEqual([a?.progress, a?.message, a?.checkpoint], [10, "started", undefined]);
    assert.deepEqual([b?.progress, b?.message, b?.checkpoint?.toString()], [40, undefined, '{"page":2}']);
    assert.deepEqual([c?.progress, c?.message], [undefined, "only the message"]);
    assert.deepEqual([a?.queue, a?.jobId, a?.leaseToken], ["test", "job-1", "fake-lease-token"]);
  });

  it("a progress outside 0-100 is refused before sending", async () => {
    const errors: unknown[] = [];
    const r = await runHandler(async (_j, ctx) => {
      for (const p of [101, -1, 2.5]) await ctx.progress(p).catch((e: unknown) => errors.push(e));
    });
    assert.equal(r.reports.length, 0);
    assert.equal(errors.length, 3);
    assert.ok(errors.every((e) => e instanceof RangeError));
  });

  it("RateLimited with pauseGroup sets pause_group; a JobCancelled is NO_RETRY 'cancelled'", async () => {
    const r = await runHandler(() => {
      throw new RateLimited(1500, { pauseGroup: true });
    });
    assert.ok(r.outcome === "fail");
    assert.deepEqual([r.disposition, r.retryAfterMs, r.pauseGroup, r.pauseQueue], ["RATE_LIMITED", 1500, true, false]);
    const f = failureOf(new JobCancelled("customer left"));
    assert.equal(f.disposition, FailDisposition.FAIL_DISPOSITION_NO_RETRY);
    assert.equal(f.error.errorType, "cancelled");
    assert.equal(f.error.message, "cancelled: customer left");
  });

  it("a refused report is LeaseLost for codes 9 and 5, else ReportRefused with the code", () => {
    assert.ok(reportError(9, "lease lost") instanceof LeaseLost);
    assert.ok(reportError(5, "no job") instanceof LeaseLost);
    const e = reportError(8, "checkpoint over 65536 bytes");
    assert.ok(e instanceof ReportRefused && e.code === 8 && e.message.includes("65536"));
  });

  it("jobSpec takes groupKey, expireAt or ttl (not both)", () => {
    const at = new Date("2030-01-02T03:04:05Z");
    const a = jobSpec("q", "n", {}, { groupKey: "tenant-a", expireAt: at });
    assert.equal(a.groupKey, "tenant-a");
    assert.equal(a.expireTime?.getTime(), at.getTime());
    assert.equal(a.ttl, undefined);
    const b = jobSpec("q", "n", {}, { ttl: 300_000 });
    assert.deepEqual(b.ttl, { seconds: 300, nanos: 0 });
    assert.equal(b.groupKey, "");
    assert.throws(() => jobSpec("q", "n", {}, { expireAt: at, ttl: 5 }), /not both/);
  });

  it("runHandler's cancel aborts ctx.signal with a JobCancelled; a handler that stops fails as cancelled", async () => {
    const reasons: unknown[] = [];
    const stops: ((signal: AbortSignal) => Promise<unknown>)[] = [
      (signal) => Promise.resolve().then(() => signal.throwIfAborted()), // the JobCancelled itself
      (signal) => sleep(10_000, undefined, { signal }), // an AbortError (cause: the JobCancelled)
      (signal) => sleep(10_000, undefined, { signal }).catch(() => Promise.reject(new DOMException("stop", "AbortError"))),
    ];
    for (const stop of stops) {
      const r = await runHandler(
        async (_j, ctx) => {
          await new Promise<void>((resolve) => ctx.signal.addEventListener("abort", () => resolve()));
          reasons.push(ctx.cancelReason);
          await stop(ctx.signal);
        },
        { cancel: { afterMs: 20, reason: "customer left" } },
      );
      assert.ok(r.outcome === "fail");
      assert.deepEqual([r.disposition, r.error.errorType, r.error.message], ["NO_RETRY", "cancelled", "cancelled: customer left"]);
    }
    assert.deepEqual(reasons, Array(3).fill("customer left"));
  });

  it("after runHandler's cancel, a handler that returns anyway is acked; another error keeps its record", async () => {
    const finishes = await runHandler(
      async (_j, ctx) => {
        await new Promise<void>((resolve) => ctx.signal.addEventListener("abort", () => resolve()));
        ctx.setResult("finished anyway");
      },
      { cancel: { afterMs: 20, reason: "customer left" } },
    );
    assert.ok(finishes.outcome === "ack");
    assert.equal(finishes.result?.toString(), "finished anyway");
    const throws = await runHandler(
      async (_j, ctx) => {
        await new Promise<void>((resolve) => ctx.signal.addEventListener("abort", () => resolve()));
        throw new RangeError("half written");
      },
      { cancel: { afterMs: 20 } },
    );
    assert.ok(throws.outcome === "fail");
    assert.deepEqual([throws.disposition, throws.error.errorType], ["RETRY", "RangeError"]);
  });
});
