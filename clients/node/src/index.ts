/**
 * jobwire's TypeScript SDK.
 *
 * - {@link Client}: enqueue jobs (`enqueue`, `enqueueBatch`), read them (`getJob`), and the
 *   dead-letter and queue services (`client.deadLetters`, `client.queues`).
 * - {@link Worker}: handlers per job name, concurrency as credits, heartbeats, reconnects with
 *   ExtendLease, graceful drain on SIGTERM.
 * - Errors a handler throws: {@link NonRetryable}, {@link RetryAfter}, {@link RateLimited}.
 * - Job control: `client.cancelJob` / `cancelJobs` / `deleteJob`, `client.groups`; a handler
 *   sees a cancel on `ctx.signal` (a {@link JobCancelled}), reports with `ctx.progress` /
 *   `ctx.saveCheckpoint` ({@link LeaseLost}, {@link ReportRefused}) and sets `ctx.setResult`.
 * - `@jobwire/client/testing`: run a handler against a fake lease; start a real jobwire.
 *
 * The generated protobuf types are exported as `pb` (ts-proto, `src/gen/`).
 */
export { Client, jobSpec } from "./client.js";
export type {
  BackoffOptions,
  BatchItem,
  BatchResult,
  CancelCount,
  ClientOptions,
  EnqueueOptions,
  EnqueueResult,
  JobFilterOptions,
} from "./client.js";
export type { CallSettings, ChannelSettings, KeepaliveOptions, TlsOptions } from "./channel.js";
export { DEFAULT_KEEPALIVE } from "./channel.js";
export { DeadLetters, Queues, type DeadLetterSelector } from "./admin.js";
export { Groups, rateLimit, type GroupConfigChange, type RateLimitOptions } from "./groups.js";
export { Worker, type WorkerOptions, type WorkerStats } from "./worker.js";
export { errorInfo, notReplicatedJobId } from "./status.js";
export type { Handler, Job, JobContext, Outcome } from "./handler.js";
export {
  JobCancelled,
  LeaseLost,
  NonRetryable,
  RateLimited,
  ReportRefused,
  RetryAfter,
  failureOf,
  type Failure,
  type JobErrorOptions,
  type RateLimitedOptions,
} from "./errors.js";
export { consoleLogger, silentLogger, type Logger, type LogLevel } from "./logger.js";
export { encodePayload, decodePayload, msToDuration, durationToMs, type Payload } from "./convert.js";
export { fullJitter } from "./backoff.js";
export { status } from "@grpc/grpc-js";
export * as pb from "./pb.js";
