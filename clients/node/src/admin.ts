/**
 * Thin wrappers of the DeadLetterService and the QueueService: the generated requests with
 * defaults filled in, promises instead of callbacks, and the client's deadline and retries
 * (reads are retried on UNAVAILABLE; changes are not, except the idempotent pause and resume).
 */
import type { CallSettings } from "./channel.js";
import {
  DeadLetterFilter,
  type DeadLetterServiceClient,
  type DeleteDeadLettersResponse,
  type ListDeadLettersResponse,
  type ReplayDeadLettersResponse,
} from "./gen/jobwire/v1/dead_letter_service.js";
import type { Job } from "./gen/jobwire/v1/job.js";
import {
  QueueConfig,
  type DeleteQueueResponse,
  type QueueServiceClient,
  type QueueStats,
} from "./gen/jobwire/v1/queue_service.js";
import type { Client } from "./client.js";

/** Which dead jobs: ids, or a filter (every set field must match). */
export type DeadLetterSelector = { jobIds: string[] } | { filter: Partial<DeadLetterFilter> };

function selector(s: DeadLetterSelector): { jobIds: string[]; filter: DeadLetterFilter | undefined } {
  return "jobIds" in s
    ? { jobIds: s.jobIds, filter: undefined }
    : { jobIds: [], filter: DeadLetterFilter.fromPartial(s.filter) };
}

/** The dead-letter queue of each queue: jobs that failed for good, kept for a person to look at. */
export class DeadLetters {
  /** @internal */
  constructor(
    private readonly stub: DeadLetterServiceClient,
    private readonly client: Client,
  ) {}

  /** One page of `queue`'s dead jobs, oldest death first (pageSize 1 to 1000, default 100). */
  list(
    queue: string,
    o: { pageSize?: number; pageToken?: string; filter?: Partial<DeadLetterFilter> } & CallSettings = {},
  ): Promise<ListDeadLettersResponse> {
    const req = {
      queue,
      pageSize: o.pageSize ?? 0,
      pageToken: o.pageToken ?? "",
      filter: o.filter === undefined ? undefined : DeadLetterFilter.fromPartial(o.filter),
    };
    return this.client.unary(this.stub.listDeadLetters.bind(this.stub), req, true, o);
  }

  /** Every dead job of `queue` that matches `filter`, page after page. */
  async *all(queue: string, filter?: Partial<DeadLetterFilter>, s: CallSettings = {}): AsyncGenerator<Job> {
    let pageToken = "";
    do {
      const page = await this.list(queue, { ...s, pageSize: 1000, pageToken, ...(filter ? { filter } : {}) });
      yield* page.deadLetters;
      pageToken = page.nextPageToken;
    } while (pageToken !== "");
  }

  /** One dead job (NOT_FOUND when it is not dead). */
  async get(queue: string, jobId: string, s: CallSettings = {}): Promise<Job> {
    const res = await this.client.unary(this.stub.getDeadLetter.bind(this.stub), { queue, jobId }, true, s);
    if (res.deadLetter === undefined) throw new Error("GetDeadLetter answered without a job");
    return res.deadLetter;
  }

  /** Moves dead jobs back to waiting under their ids with a fresh attempt budget (idempotent). */
  replay(queue: string, which: DeadLetterSelector, s: CallSettings = {}): Promise<ReplayDeadLettersResponse> {
    return this.client.unary(this.stub.replayDeadLetters.bind(this.stub), { queue, ...selector(which) }, true, s);
  }

  /** Removes dead jobs for good (idempotent: ids no longer dead are skipped). */
  delete(queue: string, which: DeadLetterSelector, s: CallSettings = {}): Promise<DeleteDeadLettersResponse> {
    return this.client.unary(this.stub.deleteDeadLetters.bind(this.stub), { queue, ...selector(which) }, true, s);
  }
}

/** Queue administration: stats, pause and resume, config, purge, delete. */
export class Queues {
  /** @internal */
  constructor(
    private readonly stub: QueueServiceClient,
    private readonly client: Client,
  ) {}

  /** Every queue with its stats, sorted by name. */
  async list(s: CallSettings = {}): Promise<QueueStats[]> {
    return (await this.client.unary(this.stub.listQueues.bind(this.stub), {}, true, s)).queues;
  }

  /** A queue's counts per state, ages, limits, pause flag and config. */
  async stats(queue: string, s: CallSettings = {}): Promise<QueueStats> {
    const res = await this.client.unary(this.stub.getQueueStats.bind(this.stub), { queue }, true, s);
    if (res.stats === undefined) throw new Error("GetQueueStats answered without stats");
    return res.stats;
  }

  /** Stops leasing from `queue` on every replica (enqueues still accepted). */
  async pause(queue: string, s: CallSettings = {}): Promise<void> {
    await this.client.unary(this.stub.pauseQueue.bind(this.stub), { queue }, true, s);
  }

  /** Resumes leasing from `queue`. */
  async resume(queue: string, s: CallSettings = {}): Promise<void> {
    await this.client.unary(this.stub.resumeQueue.bind(this.stub), { queue }, true, s);
  }

  /** The queue's config (defaults, retention, limits). */
  async getConfig(queue: string, s: CallSettings = {}): Promise<QueueConfig> {
    const res = await this.client.unary(this.stub.getQueueConfig.bind(this.stub), { queue }, true, s);
    return res.config ?? QueueConfig.fromPartial({});
  }

  /**
   * Changes the fields named in `updateMask` (snake_case, AIP-134: default_max_attempts,
   * default_backoff, default_timeout, retention, rate_limit, max_active, and for job control
   * group_max_active, group_rate_limit, cancel_grace, dead_letter_expired); a named field left
   * unset is reset. No mask: every field set in `config`. `rateLimit()` builds a RateLimit.
   */
  async updateConfig(queue: string, config: Partial<QueueConfig>, updateMask?: string[], s: CallSettings = {}): Promise<QueueConfig> {
    const req = { queue, config: QueueConfig.fromPartial(config), updateMask };
    const res = await this.client.unary(this.stub.updateQueueConfig.bind(this.stub), req, true, s);
    return res.config ?? QueueConfig.fromPartial({});
  }

  /** Deletes waiting and delayed jobs (and completed / dead ones if asked); returns how many. */
  async purge(queue: string, o: { includeCompleted?: boolean; includeDead?: boolean } & CallSettings = {}): Promise<number> {
    const req = { queue, includeCompleted: o.includeCompleted ?? false, includeDead: o.includeDead ?? false };
    return (await this.client.unary(this.stub.purgeQueue.bind(this.stub), req, false, o)).deleted;
  }

  /** Deletes the queue and every job in it (FAILED_PRECONDITION while leased unless `force`). */
  delete(queue: string, o: { force?: boolean } & CallSettings = {}): Promise<DeleteQueueResponse> {
    return this.client.unary(this.stub.deleteQueue.bind(this.stub), { queue, force: o.force ?? false }, false, o);
  }
}
