/**
 * Runs a handler against a fake lease, without a server: the same decoding, context and error
 * mapping as a {@link Worker} (see handler.ts), so a unit test sees the ack or the Fail
 * (disposition, error type, retry_after) the server would get.
 */
import { encodePayload, type Payload } from "../convert.js";
import { JobCancelled, type Failure } from "../errors.js";
import { FailDisposition, JobState } from "../gen/jobwire/v1/job.js";
import { Job as PbJob, type AttemptError } from "../gen/jobwire/v1/job.js";
import type { Lease, ReportProgressRequest } from "../gen/jobwire/v1/worker_service.js";
import { invoke, type Handler } from "../handler.js";
import { silentLogger, type Logger } from "../logger.js";

/** The fake lease's fields; everything has a default. */
export interface FakeLease {
  queue?: string;
  jobId?: string;
  name?: string;
  payload?: Payload;
  contentType?: string;
  metadata?: Record<string, string>;
  attempt?: number;
  maxAttempts?: number;
  idempotencyKey?: string;
  leaseToken?: string;
  /** The previous attempt's error (a retry). */
  lastError?: Partial<AttemptError>;
  /** Abort it to test the handler's reaction to cancellation. */
  signal?: AbortSignal;
  /** A previous attempt's checkpoint, seen as `ctx.checkpoint`. */
  checkpoint?: Uint8Array;
  /** The job's group key. */
  groupKey?: string;
  /**
   * Cancel the job `afterMs` into the run, as CancelJob would: `ctx.signal` aborts with a
   * JobCancelled. A handler that then throws (the abort included: recorded as `cancelled`) ends
   * as the Fail the worker would send; one that returns anyway as an ack.
   */
  cancel?: { afterMs: number; reason?: string };
  logger?: Logger;
}

/** What the handler's attempt came to, as the worker would report it. */
export type HandlerResult = (
  | { outcome: "ack"; /** What `ctx.setResult` set. */ result: Buffer | undefined }
  | {
      outcome: "fail";
      disposition: "RETRY" | "NO_RETRY" | "RATE_LIMITED";
      error: Failure["error"];
      retryAfterMs: number | undefined;
      pauseQueue: boolean;
      pauseGroup: boolean;
    }
) & {
  /** The progress reports and checkpoints the handler made, in order (recorded, not sent). */
  reports: ReportProgressRequest[];
};

/** The Lease a {@link FakeLease} stands for. */
export function fakeLease(f: FakeLease = {}): Lease {
  const p = encodePayload(f.payload ?? {}, f.contentType);
  const job = PbJob.fromPartial({
    queue: f.queue ?? "test",
    jobId: f.jobId ?? "job-1",
    name: f.name ?? "test-job",
    payload: p.payload,
    contentType: p.contentType,
    metadata: f.metadata ?? {},
    state: JobState.JOB_STATE_ACTIVE,
    maxAttempts: f.maxAttempts ?? 1,
    attemptsMade: f.attempt ?? 1,
    errors: f.lastError ? [f.lastError] : [],
    checkpoint: f.checkpoint === undefined ? undefined : Buffer.from(f.checkpoint),
    groupKey: f.groupKey ?? "",
  });
  return {
    job,
    attempt: f.attempt ?? 1,
    leaseToken: f.leaseToken ?? "fake-lease-token",
    leaseDeadline: new Date(Date.now() + 30_000),
    idempotencyKey: f.idempotencyKey ?? `${job.queue}/${job.jobId}`,
  };
}

/**
 * Runs `handler` once on a fake lease and returns what the worker would send:
 * `{ outcome: "ack", result }` or `{ outcome: "fail", disposition, error, retryAfterMs,
 * pauseQueue, pauseGroup }`, with the progress reports it made in `reports`.
 */
export async function runHandler<T>(handler: Handler<T>, lease: FakeLease = {}): Promise<HandlerResult> {
  const controller = new AbortController();
  const signal = lease.signal ?? controller.signal;
  const reports: ReportProgressRequest[] = [];
  let cancelled: JobCancelled | undefined;
  const cancel = lease.cancel;
  const timer =
    cancel === undefined
      ? undefined
      : setTimeout(() => {
          cancelled = new JobCancelled(cancel.reason ?? "");
          controller.abort(cancelled);
        }, cancel.afterMs);
  const o = await invoke(handler, fakeLease(lease), {
    signal: () => signal,
    workerId: "test-worker",
    logger: lease.logger ?? silentLogger,
    saved: reports,
    cancelled: () => cancelled,
  });
  clearTimeout(timer);
  if (o.kind === "ack") return { outcome: "ack", result: o.result, reports };
  const names: Record<number, "RETRY" | "NO_RETRY" | "RATE_LIMITED"> = {
    [FailDisposition.FAIL_DISPOSITION_RETRY]: "RETRY",
    [FailDisposition.FAIL_DISPOSITION_NO_RETRY]: "NO_RETRY",
    [FailDisposition.FAIL_DISPOSITION_RATE_LIMITED]: "RATE_LIMITED",
  };
  const f = o.failure;
  return {
    outcome: "fail",
    disposition: names[f.disposition] ?? "RETRY",
    error: f.error,
    retryAfterMs: f.retryAfterMs,
    pauseQueue: f.pauseQueue,
    pauseGroup: f.pauseGroup ?? false,
    reports,
  };
}
