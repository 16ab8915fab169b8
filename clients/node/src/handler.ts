/**
 * What a handler sees (the job and its context) and how its result becomes an outcome (ack,
 * or a Fail per {@link failureOf}). Shared by the {@link Worker} and the test helper
 * `runHandler`, so a handler tested against a fake lease behaves as it will in production.
 */
import { decodePayload } from "./convert.js";
import { failureOf, NonRetryable, type Failure } from "./errors.js";
import type { AttemptError, Job as PbJob } from "./gen/jobwire/v1/job.js";
import type { Lease } from "./gen/jobwire/v1/worker_service.js";
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
   * Aborted when the worker gives the attempt up: the shutdown grace ran out, or the lease was
   * lost (another worker may hold the job now). Pass it to fetch() and friends.
   */
  signal: AbortSignal;
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

/** A handler: resolve to ack; throw (or reject) to fail, typed by the error (see errors.ts). */
export type Handler<T = unknown> = (job: Job<T>, ctx: JobContext) => Promise<void> | void;

/** How an attempt ended. */
export type Outcome = { kind: "ack" } | { kind: "fail"; failure: Failure };

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
}

/** Runs `handler` on `lease` and maps what it did to an outcome; never throws. */
export async function invoke<T>(handler: Handler<T>, lease: Lease, c: InvokeContext): Promise<Outcome> {
  try {
    const job = jobOf<T>(lease);
    const ctx: JobContext = {
      get signal() {
        return c.signal();
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
    return { kind: "ack" };
  } catch (e) {
    return { kind: "fail", failure: failureOf(e) };
  }
}
