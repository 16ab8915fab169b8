/**
 * A thin wrapper of the GroupService: a queue's groups (a job's `groupKey`: a tenant, a
 * customer), their numbers, their own weight, concurrency and rate limit, and pausing one group
 * while the others go on. Every call is safe to repeat, so each is retried on UNAVAILABLE.
 */
import type { CallSettings } from "./channel.js";
import type { Client } from "./client.js";
import { msToDuration } from "./convert.js";
import {
  GroupConfig,
  type GroupServiceClient,
  type GroupStats,
  type ListGroupsResponse,
} from "./gen/jobwire/v1/group_service.js";
import type { RateLimit } from "./gen/jobwire/v1/queue_service.js";

/** A rate limit: at most `max` job starts per sliding `periodMs`. */
export interface RateLimitOptions {
  max: number;
  periodMs: number;
}

/** The RateLimit message of {@link RateLimitOptions} (for QueueConfig.rateLimit / groupRateLimit too). */
export function rateLimit(r: RateLimitOptions): RateLimit {
  return { max: r.max, period: msToDuration(r.periodMs) };
}

/** What {@link Groups.updateConfig} changes; a field left out keeps its value. */
export interface GroupConfigChange {
  /** Its share of leases among the groups with waiting jobs (1 to 1000). */
  weight?: number;
  /** Most of its jobs leased at once across everyone (1 to 1,000,000). */
  maxActive?: number;
  /** Rate limit on its job starts. */
  rateLimit?: RateLimitOptions;
  /** Fields that go back to the queue's defaults: "weight", "max_active", "rate_limit". */
  reset?: ("weight" | "max_active" | "rate_limit")[];
}

/** A queue's groups: numbers, config, pause and resume. */
export class Groups {
  /** @internal */
  constructor(
    private readonly stub: GroupServiceClient,
    private readonly client: Client,
  ) {}

  /**
   * One page of `queue`'s groups with waiting or active jobs, most waiting first (pageSize 1 to
   * 1000, default 100); `groupsWaiting` counts those with waiting jobs.
   */
  list(queue: string, o: { pageSize?: number; pageToken?: string } & CallSettings = {}): Promise<ListGroupsResponse> {
    const req = { queue, pageSize: o.pageSize ?? 0, pageToken: o.pageToken ?? "" };
    return this.client.unary(this.stub.listGroups.bind(this.stub), req, true, o);
  }

  /** Every group of `queue` with waiting or active jobs, page after page. */
  async *all(queue: string, s: CallSettings = {}): AsyncGenerator<GroupStats> {
    let pageToken = "";
    do {
      const page = await this.list(queue, { ...s, pageSize: 1000, pageToken });
      yield* page.groups;
      pageToken = page.nextPageToken;
    } while (pageToken !== "");
  }

  /** One group's counts, config and pause (a group with no jobs and no config reads as empty). */
  async get(queue: string, groupKey: string, s: CallSettings = {}): Promise<GroupStats> {
    const res = await this.client.unary(this.stub.getGroup.bind(this.stub), { queue, groupKey }, true, s);
    if (res.group === undefined) throw new Error("GetGroup answered without a group");
    return res.group;
  }

  /** Changes the group's own config (only the fields given); resolves to its config after. */
  async updateConfig(queue: string, groupKey: string, change: GroupConfigChange, s: CallSettings = {}): Promise<GroupConfig> {
    const paths: string[] = [...(change.reset ?? [])];
    const config: GroupConfig = { weight: undefined, maxActive: undefined, rateLimit: undefined };
    if (change.weight !== undefined) {
      config.weight = change.weight;
      paths.push("weight");
    }
    if (change.maxActive !== undefined) {
      config.maxActive = change.maxActive;
      paths.push("max_active");
    }
    if (change.rateLimit !== undefined) {
      config.rateLimit = rateLimit(change.rateLimit);
      paths.push("rate_limit");
    }
    if (paths.length === 0) throw new TypeError("nothing to change: give weight, maxActive, rateLimit or reset");
    const req = { queue, groupKey, config, updateMask: paths };
    const res = await this.client.unary(this.stub.updateGroupConfig.bind(this.stub), req, true, s);
    return res.config ?? GroupConfig.fromPartial({});
  }

  /**
   * Stops leasing the group's jobs on every replica for `durationMs` (default: until
   * {@link Groups.resume}); enqueues are still accepted and the other groups go on. Resolves to
   * until when it is paused.
   */
  async pause(queue: string, groupKey: string, durationMs?: number, s: CallSettings = {}): Promise<Date | undefined> {
    const req = { queue, groupKey, duration: durationMs === undefined ? undefined : msToDuration(durationMs) };
    return (await this.client.unary(this.stub.pauseGroup.bind(this.stub), req, true, s)).pausedUntil;
  }

  /** Leases the group's jobs again (paused by {@link Groups.pause} or a worker's RateLimited with pauseGroup). */
  async resume(queue: string, groupKey: string, s: CallSettings = {}): Promise<void> {
    await this.client.unary(this.stub.resumeGroup.bind(this.stub), { queue, groupKey }, true, s);
  }
}
