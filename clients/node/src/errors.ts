/**
 * The errors a handler throws to say how a failed attempt should be settled, and the mapping
 * from any thrown value to a Fail (disposition, error record, retry_after).
 *
 * - {@link NonRetryable}: the error is permanent (a 400, a bad address): `NO_RETRY`, the job
 *   goes straight to the dead-letter queue, its remaining attempts skipped (Temporal's
 *   `nonRetryable`).
 * - {@link RetryAfter}: retry, but not before the given delay: `RETRY` with `retry_after`,
 *   overriding the job's backoff for this retry.
 * - {@link RateLimited}: the downstream said "slow down" (a 429): `RATE_LIMITED` with
 *   `retry_after`; no attempt is charged; `pauseQueue` pauses the whole queue that long,
 *   `pauseGroup` only the job's group (its tenant).
 * - {@link JobCancelled}: the job was cancelled (CancelJob) while its handler ran: the reason
 *   of the handler's aborted signal; settled as a Fail, which the server ends CANCELLED.
 * - anything else: `RETRY` with the error's type name, message and stack (the job's backoff
 *   applies while attempts remain).
 */
import { FailDisposition } from "./gen/jobwire/v1/job.js";
import type { JobError } from "./gen/jobwire/v1/worker_service.js";

/** Options common to the typed errors. */
export interface JobErrorOptions {
  /** Machine-readable type recorded on the attempt (e.g. "invalid_address"); default the class name. */
  errorType?: string;
  /** Free-form details (a response body); default the stack trace. */
  details?: string;
  /** The error that caused this one. */
  cause?: unknown;
}

/** The attempt failed for good: the job is dead-lettered now (disposition NO_RETRY). */
export class NonRetryable extends Error {
  override readonly name: string = "NonRetryable";
  /** Recorded as the attempt's error_type. */
  readonly errorType: string | undefined;
  /** Recorded as the attempt's details. */
  readonly details: string | undefined;
  constructor(message: string, opts: JobErrorOptions = {}) {
    super(message, opts.cause === undefined ? undefined : { cause: opts.cause });
    this.errorType = opts.errorType;
    this.details = opts.details;
  }
}

/** Retry this job no sooner than `delayMs` from now (disposition RETRY with retry_after). */
export class RetryAfter extends Error {
  override readonly name: string = "RetryAfter";
  /** The delay before the next attempt, in milliseconds (0 to 7 days). */
  readonly delayMs: number;
  readonly errorType: string | undefined;
  readonly details: string | undefined;
  constructor(delayMs: number, message = `retry after ${delayMs} ms`, opts: JobErrorOptions = {}) {
    super(message, opts.cause === undefined ? undefined : { cause: opts.cause });
    this.delayMs = delayMs;
    this.errorType = opts.errorType;
    this.details = opts.details;
  }
}

/** Options of {@link RateLimited}. */
export interface RateLimitedOptions extends JobErrorOptions {
  /** Pause leasing from the whole queue for the delay, on every server replica (default false). */
  pauseQueue?: boolean;
  /**
   * Pause leasing only the job's group (its `groupKey`: the tenant whose limit was hit) for the
   * delay, on every server replica; the queue's other groups go on (default false).
   */
  pauseGroup?: boolean;
  /** The message recorded (default "rate limited for N ms"). */
  message?: string;
}

/**
 * The downstream is rate limiting: the job comes back after `delayMs` without using an attempt
 * (disposition RATE_LIMITED), optionally pausing the whole queue (BullMQ's queue-wide rate
 * limit after a 429).
 */
export class RateLimited extends Error {
  override readonly name: string = "RateLimited";
  /** When to come back, in milliseconds. */
  readonly delayMs: number;
  /** Whether the whole queue pauses for `delayMs`. */
  readonly pauseQueue: boolean;
  /** Whether the job's group pauses for `delayMs`. */
  readonly pauseGroup: boolean;
  readonly errorType: string | undefined;
  readonly details: string | undefined;
  constructor(delayMs: number, opts: RateLimitedOptions = {}) {
    super(opts.message ?? `rate limited for ${delayMs} ms`, opts.cause === undefined ? undefined : { cause: opts.cause });
    this.delayMs = delayMs;
    this.pauseQueue = opts.pauseQueue ?? false;
    this.pauseGroup = opts.pauseGroup ?? false;
    this.errorType = opts.errorType;
    this.details = opts.details;
  }
}

/**
 * The job was cancelled (CancelJob / CancelJobs) while its handler ran: the handler's
 * `ctx.signal` is aborted with this as its reason (so `fetch` and friends reject with it). What
 * the handler then returns or throws settles the job as a Fail (error type `cancelled`), which
 * the server ends CANCELLED.
 */
export class JobCancelled extends Error {
  override readonly name: string = "JobCancelled";
  /** Recorded as the attempt's error_type. */
  readonly errorType = "cancelled";
  /** The reason given with the cancel ("" when none). */
  readonly reason: string;
  /** When the server revokes the lease unless the job is settled by then. */
  readonly revokeTime: Date | undefined;
  constructor(reason: string, revokeTime?: Date) {
    super(reason === "" ? "cancelled" : `cancelled: ${reason}`);
    this.reason = reason;
    this.revokeTime = revokeTime;
  }
}

/**
 * A progress report or checkpoint was refused because the attempt's lease is gone (it expired,
 * or a cancelled job's lease was revoked): another worker may run the job now; stop working,
 * what this attempt returns is dropped.
 */
export class LeaseLost extends Error {
  override readonly name: string = "LeaseLost";
}

/**
 * The server refused a progress report or checkpoint for another reason than a lost lease:
 * `code` INVALID_ARGUMENT (a progress above 100, a message over 256 bytes), RESOURCE_EXHAUSTED
 * (a checkpoint over the server's limit), ... Nothing of that report was saved.
 */
export class ReportRefused extends Error {
  override readonly name: string = "ReportRefused";
  constructor(
    /** The gRPC status code (`status.INVALID_ARGUMENT`, ...). */
    readonly code: number,
    message: string,
  ) {
    super(`progress report refused (code ${code}): ${message}`);
  }
}

/** What a refused report rejects with: {@link LeaseLost} for FAILED_PRECONDITION (9) and NOT_FOUND (5), else {@link ReportRefused}. */
export function reportError(code: number, message: string): Error {
  if (code === 9 || code === 5) return new LeaseLost(message === "" ? "lease lost" : `lease lost: ${message}`);
  return new ReportRefused(code, message);
}

/** The Fail sent instead of an Ack whose result the server refused as too large. */
export function resultTooLarge(message: string): Failure {
  return {
    disposition: FailDisposition.FAIL_DISPOSITION_NO_RETRY,
    error: { errorType: "result_too_large", message: `result refused: ${message}`, details: "" },
    pauseQueue: false,
  };
}

/** The error record's limits (bytes): error_type 128 (longer is INVALID_ARGUMENT), details 8 KiB here. */
const MAX_TYPE_BYTES = 128;
/** Stack traces are cut to 8 KiB: enough to locate a bug, small enough for every attempt record. */
export const MAX_DETAILS_BYTES = 8 * 1024;
/** Messages are cut at 8 KiB by the server anyway; cutting here saves the bytes on the wire. */
const MAX_MESSAGE_BYTES = 8 * 1024;

/** `s` cut to at most `max` UTF-8 bytes (on a character boundary). */
export function truncateUtf8(s: string, max: number): string {
  const buf = Buffer.from(s, "utf8");
  if (buf.length <= max) return s;
  let end = max;
  // Back off continuation bytes (10xxxxxx) so no character is split.
  while (end > 0 && ((buf[end] ?? 0) & 0xc0) === 0x80) end--;
  return buf.subarray(0, end).toString("utf8");
}

/** How a failed attempt is reported to the server. */
export interface Failure {
  disposition: FailDisposition;
  error: JobError;
  /** RETRY: overrides the backoff; RATE_LIMITED: when to come back. Milliseconds. */
  retryAfterMs?: number;
  pauseQueue: boolean;
  /** RATE_LIMITED: pause the job's group too. */
  pauseGroup?: boolean;
}

function typeName(err: unknown): string {
  if (err instanceof Error) {
    const own = (err as { errorType?: unknown }).errorType;
    if (typeof own === "string" && own !== "") return own;
    return err.name || err.constructor.name || "Error";
  }
  return err === null ? "null" : typeof err;
}

function detailsOf(err: unknown): string {
  if (err instanceof Error) {
    const own = (err as { details?: unknown }).details;
    if (typeof own === "string") return own;
    return err.stack ?? "";
  }
  return "";
}

/**
 * The Fail a thrown value maps to: NonRetryable -> NO_RETRY, RetryAfter -> RETRY with
 * retry_after, RateLimited -> RATE_LIMITED, anything else -> RETRY with its type name (or an
 * `errorType` string property), message and stack trace (cut to 8 KiB).
 */
export function failureOf(err: unknown): Failure {
  const message = truncateUtf8(err instanceof Error ? err.message : String(err), MAX_MESSAGE_BYTES);
  const error: JobError = {
    message,
    errorType: truncateUtf8(typeName(err), MAX_TYPE_BYTES),
    details: truncateUtf8(detailsOf(err), MAX_DETAILS_BYTES),
  };
  if (err instanceof JobCancelled) {
    return { disposition: FailDisposition.FAIL_DISPOSITION_NO_RETRY, error: { ...error, details: "" }, pauseQueue: false };
  }
  if (err instanceof NonRetryable) {
    return { disposition: FailDisposition.FAIL_DISPOSITION_NO_RETRY, error, pauseQueue: false };
  }
  if (err instanceof RetryAfter) {
    return { disposition: FailDisposition.FAIL_DISPOSITION_RETRY, error, retryAfterMs: err.delayMs, pauseQueue: false };
  }
  if (err instanceof RateLimited) {
    return {
      disposition: FailDisposition.FAIL_DISPOSITION_RATE_LIMITED,
      error,
      retryAfterMs: err.delayMs,
      pauseQueue: err.pauseQueue,
      pauseGroup: err.pauseGroup,
    };
  }
  return { disposition: FailDisposition.FAIL_DISPOSITION_RETRY, error, pauseQueue: false };
}
