/**
 * The leases a worker holds, from delivery until their result is recorded by the server (or
 * given up on, with a log line saying why), and the unary calls that look after them while no
 * stream does: ExtendLease for leases whose stream ended (the server renews only the leases of
 * a live stream), and Ack / Fail for results finished while the stream is down.
 */
import * as grpc from "@grpc/grpc-js";
import { fullJitter } from "./backoff.js";
import { callOnce, hasCode } from "./channel.js";
import { msToDuration } from "./convert.js";
import type { JobCancelled } from "./errors.js";
import type { Outcome } from "./handler.js";
import type { Lease, WorkerServiceClient } from "./gen/jobwire/v1/worker_service.js";

/** One lease held by the worker. */
export class HeldLease {
  readonly queue: string;
  readonly jobId: string;
  readonly token: string;
  /** Made on first use: most handlers never look at their signal, and an AbortController per job costs. */
  private controller: AbortController | undefined;
  /** The handler is still running. */
  running = true;
  /** The handler's result, once it returned. */
  outcome: Outcome | undefined;
  /** A settle (on a stream or unary) is in flight. */
  settling = false;
  /** The stream generation the settle was sent on (0: unary). */
  settleGeneration = 0;
  /** Settles that found the server unreachable, in a row (for the retry backoff). */
  settleFailures = 0;
  /** Shutdown failed it already: a late result of the handler is ignored. */
  abandoned = false;
  /** ExtendLease said the lease is gone: the result cannot be recorded any more. */
  lost = false;
  /** The ExtendLease timer while no live stream renews this lease. */
  keeper: NodeJS.Timeout | undefined;
  /** An ExtendLease call is in flight. */
  extending = false;
  /** ExtendLease calls that found the server unreachable, in a row. */
  extendFailures = 0;
  /** Released: nothing more to do for it. */
  released = false;
  /** The job was cancelled (a CancelLease): whatever the handler does, it is settled as a Fail. */
  cancelled: JobCancelled | undefined;

  constructor(
    readonly key: string,
    readonly lease: Lease,
    /** The stream generation it was delivered on. */
    readonly generation: number,
    /** How long the lease ran when granted (deadline - now), in ms. */
    readonly leaseMs: number,
  ) {
    this.queue = lease.job?.queue ?? "";
    this.jobId = lease.job?.jobId ?? "";
    this.token = lease.leaseToken;
  }

  /** The handler's cancellation signal. */
  get signal(): AbortSignal {
    return (this.controller ??= new AbortController()).signal;
  }

  /** Cancels the handler (shutdown grace over, or lease lost). */
  cancel(reason: Error): void {
    (this.controller ??= new AbortController()).abort(reason);
  }
}

/** What a unary settle came to. */
export type UnaryResult = "recorded" | "lost" | "retry" | "refused";

/** Sends `h`'s outcome with the unary Ack or Fail. */
export async function settleUnary(
  stub: WorkerServiceClient,
  h: HeldLease,
  outcome: Outcome,
  timeoutMs: number,
): Promise<{ result: UnaryResult; error?: grpc.ServiceError }> {
  const base = { queue: h.queue, jobId: h.jobId, leaseToken: h.token };
  try {
    if (outcome.kind === "ack") {
      await callOnce(stub.ack.bind(stub), { ...base, result: outcome.result ?? Buffer.alloc(0) }, timeoutMs);
    } else {
      const f = outcome.failure;
      await callOnce(
        stub.fail.bind(stub),
        {
          ...base,
          disposition: f.disposition,
          error: f.error,
          retryAfter: f.retryAfterMs === undefined ? undefined : msToDuration(f.retryAfterMs),
          pauseQueue: f.pauseQueue,
          pauseGroup: f.pauseGroup ?? false,
        },
        timeoutMs,
      );
    }
    return { result: "recorded" };
  } catch (e) {
    const err = e as grpc.ServiceError;
    if (hasCode(e, grpc.status.FAILED_PRECONDITION, grpc.status.NOT_FOUND)) return { result: "lost", error: err };
    if (hasCode(e, grpc.status.UNAVAILABLE, grpc.status.DEADLINE_EXCEEDED, grpc.status.CANCELLED)) {
      return { result: "retry", error: err };
    }
    return { result: "refused", error: err };
  }
}

/** What one ExtendLease came to: the new deadline, the lease gone, or try again. */
export type ExtendResult = { kind: "extended"; deadline: Date | undefined } | { kind: "lost"; error: grpc.ServiceError } | { kind: "retry"; error: grpc.ServiceError };

/** Renews `h`'s lease by its token for the server's default lease duration (or `leaseMs`). */
export async function extendLease(
  stub: WorkerServiceClient,
  h: HeldLease,
  timeoutMs: number,
  leaseMs?: number,
): Promise<ExtendResult> {
  try {
    const res = await callOnce(
      stub.extendLease.bind(stub),
      {
        queue: h.queue,
        jobId: h.jobId,
        leaseToken: h.token,
        leaseDuration: leaseMs === undefined ? undefined : msToDuration(leaseMs),
      },
      timeoutMs,
    );
    return { kind: "extended", deadline: res.leaseDeadline };
  } catch (e) {
    const err = e as grpc.ServiceError;
    if (hasCode(e, grpc.status.FAILED_PRECONDITION, grpc.status.NOT_FOUND)) return { kind: "lost", error: err };
    return { kind: "retry", error: err };
  }
}

/** What {@link renewOnce} needs from the worker. */
export interface RenewHooks {
  stub: WorkerServiceClient;
  timeoutMs: number;
  /** The worker stopped: renew no more. */
  stopped(): boolean;
  /** Renewed; the next renewal is due in `nextMs`. */
  extended(nextMs: number): void;
  /** The server says the lease is gone (the handler was signalled already). */
  lost(details: string): void;
  /** Runs the next renewal (scheduled on `h.keeper`). */
  again(): void;
}

/**
 * One ExtendLease of `h`, then the next one scheduled: a third of the time left on success,
 * soon (within a quarter of the lease, at most 1 s) while the server is unreachable.
 */
export async function renewOnce(h: HeldLease, k: RenewHooks): Promise<void> {
  h.keeper = undefined;
  if (h.released || h.lost || k.stopped()) return;
  h.extending = true;
  const r = await extendLease(k.stub, h, k.timeoutMs);
  h.extending = false;
  if (h.released || k.stopped()) return;
  let next: number;
  if (r.kind === "extended") {
    const left = r.deadline ? r.deadline.getTime() - Date.now() : h.leaseMs;
    next = Math.max(200, Math.min(10_000, left / 3));
    h.extendFailures = 0;
    k.extended(next);
  } else if (r.kind === "lost") {
    h.lost = true;
    h.cancel(new Error("lease lost"));
    k.lost(r.error.details);
    return;
  } else {
    const cap = Math.max(100, Math.min(1_000, h.leaseMs / 4));
    next = Math.round(100 + fullJitter(h.extendFailures++, { baseMs: 100, capMs: cap }));
  }
  h.keeper = setTimeout(() => k.again(), next);
}
