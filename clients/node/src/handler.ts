/**
 * What a handler sees (the job and its context) and how its result becomes an outcome (ack,
 * or a Fail per {@link failureOf}). Shared by the {@link Worker} and the test helper
 * `runHandler`, so a handler tested against a fake lease behaves as it will in production.
 */
import { decodePayload, encodePayload, type Payload } from "./convert.js";
import { failureOf, NonRetryable, type Failure, type JobCancelled } from "./errors.js";
import type { AttemptError, Job as PbJob } from "./gen/jobwire/v1/job.js";
import type { Lease, ReportProgressRequest } from "./gen/jobwire/v1/worker_service.js";
import type { Logger } from "./logger.js";

/** A leased job as a handler sees it. */
export interface Job<T = unknown> {
  /** The job's id. */
  id: string;
  /** Its queue. */
  queue: string;
  /** The job type (what the handler was registered for). */
  name: string;
  /**
   * The payload: JSON-decoded for `application/json`, a string for `text/plain`, else the
   * bytes. `T` is not checked at run time: validate it if producers are not trusted.
   */
  payload: T;
  /** The payload's bytes as sent. */
  rawPayload: Buffer;
  /** The payload's MIME type ("" if none). */
  contentType: string;
  /** The producer's metadata. */
  metadata: Record<string, string>;
  /** Its group (a tenant, a customer; "" for the queue's default group). */
  groupKey: string;
  /** Runs allowed in the current attempt budget. */
  maxAttempts: number;
  /** The last failed attempt, if this is a retry. */
  lastError: AttemptError | undefined;
  /** The job as the server sent it. */
  proto: PbJob;
}

/** The context of one attempt. */
export interface JobContext {
  /**
   * Aborted when the handler should stop: the job was cancelled (CancelJob; the reason is then a
   * {@link JobCancelled} and {@link JobContext.cancelReason} is set), the shutdown grace ran
   * out, or the lease was lost (another worker may hold the job now). Pass it to fetch() and
   * friends. After a cancel, a handler that throws (the signal's abort included: an AbortError
   * or the JobCancelled, recorded with error type `cancelled`) settles the job as a Fail and
   * the server ends it CANCELLED; one that returns anyway is acked with its result and the job
   * ends COMPLETED ("it finished anyway", as in the Go and Rust SDKs).
   */
  signal: AbortSignal;
  /** The reason given with the job's cancel, once it was cancelled while this attempt ran; else undefined. */
  readonly cancelReason: string | undefined;
  /**
   * The last checkpoint saved for this job: an earlier attempt's (from the lease) until this
   * attempt saves one; empty when there is none. Resume from it.
   */
  readonly checkpoint: Buffer;
  /**
   * Saves progress (0-100), its message (up to 256 bytes) and/or a checkpoint (bytes, a string
   * as UTF-8, anything else as JSON; up to the server's limit, 64 KiB by default; empty clears
   * it), fenced by this attempt's lease; an omitted field keeps its last value. Resolves once
   * the server saved it; rejects with {@link LeaseLost} when the lease is gone (stop: the
   * result will be dropped), {@link ReportRefused} for a value the server refuses, RangeError
   * for a progress outside 0-100 (not sent).
   */
  report(r: { progress?: number; message?: string; checkpoint?: Payload }): Promise<void>;
  /** Saves the job's progress, 0-100, with an optional message (see {@link JobContext.report}). */
  progress(percent: number, message?: string): Promise<void>;
  /** Saves a checkpoint the next attempt finds in {@link JobContext.checkpoint} (see {@link JobContext.report}). */
  saveCheckpoint(data: Payload, also?: { progress?: number; message?: string }): Promise<void>;
  /**
   * The result to attach to the Ack (bytes, a string as UTF-8, anything else as JSON; up to the
   * server's result limit, 64 KiB by default); `getJob` returns it in `job.result`.
   */
  setResult(value: Payload): void;
  /** This attempt's number, 1-based. */
  attempt: number;
  /** Stable across attempts and replays of this job: pass it to downstream providers. */
  idempotencyKey: string;
  /** The producer's metadata (same as job.metadata). */
  metadata: Record<string, string>;
  /** The fencing token of this attempt's lease. */
  leaseToken: string;
  /** The lease's deadline when it was granted (the stream renews it while the handler runs). */
  leaseDeadline: Date | undefined;
  /** The worker's id. */
  workerId: string;
  /** The worker's logger. */
  logger: Logger;
}

/**
 * A handler: resolve to ack; throw (or reject) to fail, typed by the error (see errors.ts).
 * What it resolves to is ignored: a result goes through `ctx.setResult`.
 */
export type Handler<T = unknown> = (job: Job<T>, ctx: JobContext) => unknown;

/** How an attempt ended (an ack with the handler's result bytes, if it set one). */
export type Outcome = { kind: "ack"; result?: Buffer } | { kind: "fail"; failure: Failure };

/** The handler's view of `lease`; throws NonRetryable when the payload cannot be decoded. */
export function jobOf<T>(lease: Lease): Job<T> {
  const j = lease.job;
  if (j === undefined) throw new NonRetryable("the lease carries no job", { errorType: "InvalidLease" });
  let payload: unknown;
  try {
    payload = decodePayload(j.payload, j.contentType);
  } catch (e) {
    throw new NonRetryable(`the payload is not valid ${j.contentType}: ${(e as Error).message}`, {
      errorType: "InvalidPayload",
      cause: e,
    });
  }
  return {
    id: j.jobId,
    queue: j.queue,
    name: j.name,
    payload: payload as T,
    rawPayload: j.payload,
    contentType: j.contentType,
    metadata: j.metadata,
    groupKey: j.groupKey,
    maxAttempts: j.maxAttempts,
    lastError: j.errors[j.errors.length - 1],
    proto: j,
  };
}

/** What the worker passes to {@link invoke}; the signal is made only if the handler asks. */
export interface InvokeContext {
  signal: () => AbortSignal;
  workerId: string;
  logger: Logger;
  /** Sends a report and resolves with the server's answer (absent: reports are only recorded). */
  report?: (req: ReportProgressRequest) => Promise<void>;
  /** The job's cancel, once one arrived. */
  cancelled?: () => JobCancelled | undefined;
  /** Every report the server saved is pushed here (the test helper's record). */
  saved?: ReportProgressRequest[];
}

/** The bytes of a result or checkpoint: bytes as they are, a string as UTF-8, else JSON. */
function bytesOf(v: Payload): Buffer {
  return encodePayload(v).payload;
}

/** Runs `handler` on `lease` and maps what it did to an outcome; never throws. */
export async function invoke<T>(handler: Handler<T>, lease: Lease, c: InvokeContext): Promise<Outcome> {
  let result: Buffer | undefined;
  let checkpoint = lease.job?.checkpoint ?? Buffer.alloc(0);
  try {
    const job = jobOf<T>(lease);
    const report = async (r: { progress?: number; message?: string; checkpoint?: Payload }): Promise<void> => {
      if (r.progress !== undefined && !(Number.isInteger(r.progress) && r.progress >= 0 && r.progress <= 100)) {
        throw new RangeError(`progress must be an integer 0 to 100, got ${r.progress}`);
      }
      const req: ReportProgressRequest = {
        queue: job.queue,
        jobId: job.id,
        leaseToken: lease.leaseToken,
        progress: r.progress,
        message: r.message,
        checkpoint: r.checkpoint === undefined ? undefined : bytesOf(r.checkpoint),
      };
      if (c.report) await c.report(req);
      c.saved?.push(req);
      if (req.checkpoint !== undefined) checkpoint = req.checkpoint;
    };
    const ctx: JobContext = {
      get signal() {
        return c.signal();
      },
      get cancelReason() {
        return c.cancelled?.()?.reason;
      },
      get checkpoint() {
        return checkpoint;
      },
      report,
      progress: (percent, message) => report({ progress: percent, message }),
      saveCheckpoint: (data, also = {}) => report({ ...also, checkpoint: data }),
      setResult: (value) => {
        result = bytesOf(value);
      },
      attempt: lease.attempt,
      idempotencyKey: lease.idempotencyKey,
      metadata: job.metadata,
      leaseToken: lease.leaseToken,
      leaseDeadline: lease.leaseDeadline,
      workerId: c.workerId,
      logger: c.logger,
    };
    await handler(job, ctx);
    return result === undefined ? { kind: "ack" } : { kind: "ack", result };
  } catch (e) {
    // After the job's cancel, the abort of ctx.signal coming out of the handler (an AbortError
    // of an API it passed the signal to, or the reason rethrown) is the cancel: recorded as
    // such (NO_RETRY, error type `cancelled`). Another error keeps its own record.
    const cancelled = c.cancelled?.();
    return { kind: "fail", failure: failureOf(cancelled !== undefined && isAbortOf(e, cancelled) ? cancelled : e) };
  }
}

/** Whether `e` is the abort of a signal aborted with `reason`. */
function isAbortOf(e: unknown, reason: JobCancelled): boolean {
  if (e === reason) return true;
  if (!(e instanceof Error)) return false;
  return e.name === "AbortError" || e.cause === reason;
}
