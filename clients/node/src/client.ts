/**
 * The producer side of jobwire: {@link Client} enqueues jobs, reads them, and reaches the
 * dead-letter and queue services through {@link Client.deadLetters} and {@link Client.queues}.
 * One Client holds one gRPC channel (HTTP/2 connection) shared by every call and by the
 * {@link Worker}s built on it.
 */
import * as grpc from "@grpc/grpc-js";
import { DeadLetters, Queues } from "./admin.js";
import { Groups } from "./groups.js";
import { GroupServiceClient } from "./gen/jobwire/v1/group_service.js";
import { call, DEFAULT_RETRY, openChannel, type CallSettings, type ChannelSettings, type RetryPolicy, type UnaryMethod } from "./channel.js";
import { encodePayload, msToDuration, type Payload } from "./convert.js";
import { DeadLetterServiceClient } from "./gen/jobwire/v1/dead_letter_service.js";
import { Backoff as PbBackoff, BackoffKind, Job, JobSpec, JobState } from "./gen/jobwire/v1/job.js";
import {
  JobFilter,
  JobServiceClient,
  ListJobsFilter,
  type CancelJobsResponse,
  type EnqueueResponse,
  type ListJobsResponse,
} from "./gen/jobwire/v1/job_service.js";
import { QueueServiceClient, type ListWorkersResponse } from "./gen/jobwire/v1/queue_service.js";
import { WorkerServiceClient } from "./gen/jobwire/v1/worker_service.js";
import { consoleLogger, type Logger } from "./logger.js";
import { notReplicatedJobId } from "./status.js";

/** Options of a {@link Client}. */
export interface ClientOptions extends ChannelSettings {
  /** Deadline of each unary call, in milliseconds (default 10,000). */
  timeoutMs?: number;
  /** Retries of UNAVAILABLE for idempotent calls (default 5 tries, 100 ms -> 2 s full jitter). */
  retry?: Partial<RetryPolicy>;
  /** Where the SDK logs (default: the console, level info). A pino logger fits. */
  logger?: Logger;
}

/** A job's retry backoff. Durations in milliseconds. */
export interface BackoffOptions {
  /** "fixed": every retry waits `delayMs`; "exponential": the retry after attempt n waits delayMs * 2^(n-1). */
  kind: "fixed" | "exponential";
  /** The base delay (0 to 7 days). */
  delayMs: number;
  /** In [0, 1]: the delay d is drawn uniformly from [(1 - jitter) d, d]; 1 is full jitter. */
  jitter?: number;
  /** Caps every computed delay. */
  maxDelayMs?: number;
}

/** Options of {@link Client.enqueue}. Durations in milliseconds. */
export interface EnqueueOptions {
  /** A client-chosen id (any UTF-8, up to 256 bytes): an existing id dedupes (`created: false`). */
  jobId?: string;
  /** Wait this long before the first attempt. */
  delay?: number;
  /** Higher runs first, -1000 to 1000. */
  priority?: number;
  /** Runs, not retries: 3 is one run plus up to two retries (1 to 1000; default the queue's). */
  maxAttempts?: number;
  /** Retry backoff (default the queue's, else retry at once). */
  backoff?: BackoffOptions;
  /** Free-form strings (trace context, tenant): at most 64 entries. */
  metadata?: Record<string, string>;
  /** Per-attempt timeout: an attempt running longer fails with TIMED_OUT. */
  timeout?: number;
  /** The payload's MIME type (default: by the payload's kind, see {@link encodePayload}). */
  contentType?: string;
  /**
   * The job's group (a tenant, a customer: 1-128 bytes): the queue's groups with waiting jobs
   * are leased round-robin, each with its own concurrency and rate limit (`client.groups`).
   */
  groupKey?: string;
  /** A job not started by this time is EXPIRED instead of run (at most one of expireAt and ttl). */
  expireAt?: Date;
  /** The same as expireAt = now + ttl, in milliseconds (1 ms to 365 days). */
  ttl?: number;
}

/** Which jobs {@link Client.cancelJobs} cancels: every field given must match (at least one). */
export interface JobFilterOptions {
  /** The job name. */
  name?: string;
  /** The group key. */
  groupKey?: string;
  /** A metadata key the job has... */
  metadataKey?: string;
  /** ... with this value. */
  metadataValue?: string;
}

/** What {@link Client.cancelJobs} did. */
export interface CancelCount {
  /** WAITING and DELAYED jobs moved to CANCELLED. */
  cancelled: number;
  /** ACTIVE jobs whose workers were told to stop (CANCELLED once they settle, or after the queue's cancel_grace). */
  signalled: number;
}

/** One job of {@link Client.enqueueBatch}. */
export interface BatchItem extends EnqueueOptions {
  queue: string;
  name: string;
  payload: Payload;
}

/** What {@link Client.enqueue} returns. */
export interface EnqueueResult {
  /** The job as stored (the existing one when `created` is false). */
  job: Job;
  /** False when `jobId` was taken: nothing was changed. */
  created: boolean;
}

/** One item's outcome in {@link Client.enqueueBatch}, in request order: a job, or an error. */
export type BatchResult =
  | { ok: true; job: Job; created: boolean }
  | { ok: false; code: grpc.status; message: string; field: string };

function backoffPb(b: BackoffOptions): PbBackoff {
  return {
    kind: b.kind === "fixed" ? BackoffKind.BACKOFF_KIND_FIXED : BackoffKind.BACKOFF_KIND_EXPONENTIAL,
    delay: msToDuration(b.delayMs),
    jitter: b.jitter ?? 0,
    maxDelay: b.maxDelayMs === undefined ? undefined : msToDuration(b.maxDelayMs),
  };
}

/** The JobSpec of a job (exported for tests and advanced use). */
export function jobSpec(queue: string, name: string, payload: Payload, o: EnqueueOptions = {}): JobSpec {
  if (o.expireAt !== undefined && o.ttl !== undefined) throw new TypeError("give expireAt or ttl, not both");
  if (o.expireAt !== undefined && Number.isNaN(o.expireAt.getTime())) throw new RangeError("expireAt is an invalid Date");
  const p = encodePayload(payload, o.contentType);
  return JobSpec.fromPartial({
    queue,
    name,
    jobId: o.jobId ?? "",
    payload: p.payload,
    contentType: p.contentType,
    metadata: o.metadata ?? {},
    delay: o.delay === undefined ? undefined : msToDuration(o.delay),
    priority: o.priority ?? 0,
    maxAttempts: o.maxAttempts,
    backoff: o.backoff === undefined ? undefined : backoffPb(o.backoff),
    timeout: o.timeout === undefined ? undefined : msToDuration(o.timeout),
    groupKey: o.groupKey ?? "",
    expireTime: o.expireAt,
    ttl: o.ttl === undefined ? undefined : msToDuration(o.ttl),
  });
}

/**
 * A connection to a jobwire server.
 *
 * ```ts
 * const client = new Client("127.0.0.1:50051");
 * await client.enqueue("emails", "send-welcome", { to: "ada@example.com" }, { jobId: "welcome:ada" });
 * ```
 *
 * Errors are grpc-js `ServiceError`s (`err.code` a `grpc.status`): INVALID_ARGUMENT for bad
 * input, NOT_FOUND, UNAUTHENTICATED / PERMISSION_DENIED, UNAVAILABLE when the server or its
 * Redis is unreachable (retried first for idempotent calls: reads, and an Enqueue with a jobId).
 */
export class Client {
  /** The generated stubs, for calls the wrappers do not cover. They share the channel. */
  readonly stubs: {
    jobs: JobServiceClient;
    workers: WorkerServiceClient;
    deadLetters: DeadLetterServiceClient;
    queues: QueueServiceClient;
    groups: GroupServiceClient;
  };
  /** The DeadLetterService: list, get, replay and delete dead jobs. */
  readonly deadLetters: DeadLetters;
  /** The QueueService: stats, pause/resume, config, purge, delete. */
  readonly queues: Queues;
  /** The GroupService: a queue's groups (tenants): list, get, config, pause, resume. */
  readonly groups: Groups;
  /** Where the SDK logs. */
  readonly logger: Logger;
  /** The address dialled. */
  readonly target: string;
  readonly timeoutMs: number;
  readonly retry: RetryPolicy;
  private readonly channel: grpc.Channel;

  /** A client of the jobwire server at `target` (HOST:PORT). Connects lazily, on the first call. */
  constructor(target: string, options: ClientOptions = {}) {
    this.target = target;
    this.logger = options.logger ?? consoleLogger();
    this.timeoutMs = options.timeoutMs ?? 10_000;
    this.retry = { ...DEFAULT_RETRY, ...options.retry };
    const { channel, interceptors } = openChannel(target, options);
    this.channel = channel;
    const opts: grpc.ClientOptions = { channelOverride: channel, interceptors };
    // channelOverride: the credentials argument is unused (the channel has them).
    const insecure = grpc.credentials.createInsecure();
    this.stubs = {
      jobs: new JobServiceClient(target, insecure, opts),
      workers: new WorkerServiceClient(target, insecure, opts),
      deadLetters: new DeadLetterServiceClient(target, insecure, opts),
      queues: new QueueServiceClient(target, insecure, opts),
      groups: new GroupServiceClient(target, insecure, opts),
    };
    this.deadLetters = new DeadLetters(this.stubs.deadLetters, this);
    this.queues = new Queues(this.stubs.queues, this);
    this.groups = new Groups(this.stubs.groups, this);
  }

  /** @internal A unary call with this client's deadline and retry policy. */
  unary<Req, Res>(method: UnaryMethod<Req, Res>, req: Req, idempotent: boolean, s: CallSettings = {}): Promise<Res> {
    return call(method, req, s.timeoutMs ?? this.timeoutMs, idempotent, this.retry, s.signal);
  }

  /**
   * Enqueues one job on `queue`. `payload`: bytes as they are, a string as UTF-8, anything else
   * as JSON (content type application/json). With a `jobId` the call is idempotent (a
   * duplicate returns the stored job with `created: false`) and retried on UNAVAILABLE.
   * Without one the server chooses the id and the call is not repeated, except after
   * NOT_REPLICATED (`--redis-wait-replicas`: the job was written on the Redis master): the
   * retries carry the id the error names ({@link notReplicatedJobId}), so they find that job
   * (`created` stays true: this call created it); once the tries are spent the last error,
   * which names the id, is thrown.
   */
  async enqueue(queue: string, name: string, payload: Payload, options: EnqueueOptions & CallSettings = {}): Promise<EnqueueResult> {
    const spec = jobSpec(queue, name, payload, options);
    const enqueue = this.stubs.jobs.enqueue.bind(this.stubs.jobs);
    let res: EnqueueResponse;
    try {
      res = await this.unary(enqueue, { job: spec }, spec.jobId !== "", options);
    } catch (e) {
      const jobId = spec.jobId === "" ? notReplicatedJobId(e) : undefined;
      if (jobId === undefined || this.retry.attempts <= 1) throw e;
      const named = { ...spec, jobId };
      const timeoutMs = options.timeoutMs ?? this.timeoutMs;
      const retry = { ...this.retry, attempts: this.retry.attempts - 1 };
      res = { ...(await call(enqueue, { job: named }, timeoutMs, true, retry, options.signal)), created: true };
    }
    if (res.job === undefined) throw new Error("Enqueue answered without a job");
    return { job: res.job, created: res.created };
  }

  /**
   * Enqueues up to 1000 jobs in one call; each item succeeds or fails on its own (results in
   * request order). Retried on UNAVAILABLE only when every item has a jobId (a batch the
   * server never saw, or saw, is then safe to send again).
   */
  async enqueueBatch(items: BatchItem[], s: CallSettings = {}): Promise<BatchResult[]> {
    const jobs = items.map((i) => jobSpec(i.queue, i.name, i.payload, i));
    const res = await this.unary(
      this.stubs.jobs.enqueueBatch.bind(this.stubs.jobs),
      { jobs },
      jobs.every((j) => j.jobId !== ""),
      s,
    );
    return res.results.map((r): BatchResult => {
      if (r.error !== undefined) return { ok: false, code: r.error.code, message: r.error.message, field: r.error.field };
      if (r.job === undefined) return { ok: false, code: grpc.status.INTERNAL, message: "no job and no error", field: "" };
      return { ok: true, job: r.job, created: r.created };
    });
  }

  /**
   * Reads one job (NOT_FOUND when there is none). Job control adds `groupKey`, `expireTime`,
   * `progress`, `progressMessage`, `progressTime`, `checkpoint`, `result` (COMPLETED),
   * `cancelTime` and `cancelReason`, and for an ACTIVE job `leaseDeadline` and `workerId`.
   */
  async getJob(queue: string, jobId: string, s: CallSettings = {}): Promise<Job> {
    const res = await this.unary(this.stubs.jobs.getJob.bind(this.stubs.jobs), { queue, jobId }, true, s);
    if (res.job === undefined) throw new Error("GetJob answered without a job");
    return res.job;
  }

  /**
   * One page of `queue`'s jobs in `state` (WAITING, DELAYED, ACTIVE, COMPLETED or DEAD), in
   * that state's order: waiting in lease order, delayed by due time, active by lease deadline,
   * completed by finish time, dead by death time. Jobs come without their payload
   * ({@link Client.getJob} has it). `pageSize` 1 to 1000 (default 100); pass the response's
   * `nextPageToken` for the next page, until it is empty. `filter`: the job name and an
   * `after` / `before` time range over that same time.
   */
  listJobs(
    queue: string,
    state: JobState,
    o: { pageSize?: number; pageToken?: string; filter?: Partial<ListJobsFilter> } & CallSettings = {},
  ): Promise<ListJobsResponse> {
    const req = {
      queue,
      state,
      pageSize: o.pageSize ?? 0,
      pageToken: o.pageToken ?? "",
      filter: o.filter === undefined ? undefined : ListJobsFilter.fromPartial(o.filter),
    };
    return this.unary(this.stubs.jobs.listJobs.bind(this.stubs.jobs), req, true, o);
  }

  /**
   * Every replica's worker streams (replica, stream id, worker id, queues, free credits, held
   * leases, connected since, last heard); with `queue`, only the streams that lease from it.
   * Other replicas' streams are up to one report interval (5 s) old.
   */
  listWorkers(queue = "", s: CallSettings = {}): Promise<ListWorkersResponse> {
    return this.unary(this.stubs.queues.listWorkers.bind(this.stubs.queues), { queue }, true, s);
  }

  /**
   * Cancels a job: a WAITING or DELAYED one is CANCELLED at once; an ACTIVE one's worker is
   * told (its handler's `ctx.signal` aborts with a JobCancelled) and the job ends CANCELLED when
   * it settles, or when the queue's cancel_grace runs out. `reason` (up to 1024 bytes) is
   * recorded on the job. Resolves to the job after the call and whether this call cancelled it
   * (false: it had finished already, or a cancel was pending). NOT_FOUND for an unknown job.
   * Retried on UNAVAILABLE (a repeat finds the cancel done and says false).
   */
  async cancelJob(queue: string, jobId: string, reason = "", s: CallSettings = {}): Promise<{ job: Job; cancelled: boolean }> {
    const res = await this.unary(this.stubs.jobs.cancelJob.bind(this.stubs.jobs), { queue, jobId, reason }, true, s);
    if (res.job === undefined) throw new Error("CancelJob answered without a job");
    return { job: res.job, cancelled: res.cancelled };
  }

  /**
   * One CancelJobs call: cancels up to `limit` (1 to 10,000; default 1,000) WAITING, DELAYED and
   * ACTIVE jobs of `queue` matching `filter`; pass `nextPageToken` on as `pageToken` until it
   * is empty ({@link Client.cancelJobs} does).
   */
  cancelJobsPage(
    queue: string,
    filter: JobFilterOptions,
    o: { reason?: string; limit?: number; pageToken?: string } & CallSettings = {},
  ): Promise<CancelJobsResponse> {
    const req = {
      queue,
      filter: JobFilter.fromPartial(filter),
      reason: o.reason ?? "",
      limit: o.limit ?? 0,
      pageToken: o.pageToken ?? "",
    };
    return this.unary(this.stubs.jobs.cancelJobs.bind(this.stubs.jobs), req, true, o);
  }

  /**
   * Cancels every WAITING, DELAYED and ACTIVE job of `queue` that matches `filter` (at least one
   * field), `limit` per call, page after page; resolves to the counts.
   */
  async cancelJobs(queue: string, filter: JobFilterOptions, o: { reason?: string; limit?: number } & CallSettings = {}): Promise<CancelCount> {
    const count: CancelCount = { cancelled: 0, signalled: 0 };
    let pageToken = "";
    do {
      const page = await this.cancelJobsPage(queue, filter, { ...o, pageToken });
      count.cancelled += page.cancelled;
      count.signalled += page.signalled;
      pageToken = page.nextPageToken;
    } while (pageToken !== "");
    return count;
  }

  /**
   * Deletes a job that is not ACTIVE (FAILED_PRECONDITION: cancel it first) with its history,
   * checkpoint and result; its id is free for a new enqueue at once. Resolves to the state it
   * was in. NOT_FOUND for an unknown job (not retried: a repeat after a lost reply would say
   * NOT_FOUND).
   */
  async deleteJob(queue: string, jobId: string, s: CallSettings = {}): Promise<JobState> {
    return (await this.unary(this.stubs.jobs.deleteJob.bind(this.stubs.jobs), { queue, jobId }, false, s)).state;
  }

  /** Resolves once the channel is connected; rejects after `timeoutMs` (default 10 s). */
  waitForReady(timeoutMs = 10_000): Promise<void> {
    return new Promise((resolve, reject) => {
      this.stubs.jobs.waitForReady(Date.now() + timeoutMs, (err) => (err ? reject(err) : resolve()));
    });
  }

  /** Closes the channel; calls in flight fail with CANCELLED or UNAVAILABLE. */
  close(): void {
    this.channel.close();
  }
}
