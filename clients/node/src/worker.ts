/**
 * The {@link Worker}: handlers per job name over one Subscribe stream at a time.
 *
 * Invariants (issue 14, DESIGN.md section 3):
 * - Concurrency = credits (Pub/Sub flow control): the stream is opened with as many credits as
 *   free slots; a lease settled on the stream that delivered it returns its credit on the
 *   server; a lease from an earlier stream frees a slot here only, so one credit is granted
 *   then. The worker never holds more leases than `concurrency`.
 * - Liveness comes from the stream: heartbeats while it is open (any message renews the
 *   stream's leases on the server), gRPC keepalive, and a watchdog that replaces a stream
 *   whose acks go unanswered.
 * - A broken stream is replaced with full-jitter backoff (0.5 s -> 30 s) under the same
 *   worker id; every lease it held is renewed with ExtendLease until settled, and results
 *   finished meanwhile go out with the unary Ack / Fail (FAILED_PRECONDITION: lease lost,
 *   logged and dropped; UNAVAILABLE: kept and retried). No finished result is dropped without
 *   a log line.
 * - Shutdown (SIGTERM / SIGINT unless `handleSignals: false`, or {@link Worker.close}): Drain,
 *   wait for held jobs up to the grace, then abort the handlers' signals and hand what is left
 *   back uncharged (a RELEASE Fail: waiting again, no attempt counted), then close the stream.
 */
import { hostname } from "node:os";
import { randomBytes } from "node:crypto";
import { status as grpcStatus, type StatusObject } from "@grpc/grpc-js";
import { fullJitter, sleep, type BackoffOptions } from "./backoff.js";
import type { Client } from "./client.js";
import { Control } from "./control.js";
import { resultTooLarge } from "./errors.js";
import type { Draining, Lease, Settled } from "./gen/jobwire/v1/worker_service.js";
import { invoke, type Handler, type Outcome } from "./handler.js";
import { HeldLease, renewOnce, settleUnary } from "./held.js";
import type { Logger } from "./logger.js";
import { LeaseStream, leaseKey, type StreamEvents } from "./stream.js";
import { Liveness } from "./liveness.js";
import { Shutdown, shutdownFailure } from "./shutdown.js";

/** Refusals of a stream's open that no retry can fix: `run()` rejects with them (conformance README, "Conventions"). */
const REFUSED_FOR_GOOD: ReadonlySet<number> = new Set([
  grpcStatus.INVALID_ARGUMENT,
  grpcStatus.UNAUTHENTICATED,
  grpcStatus.PERMISSION_DENIED,
]);

/** Options of a {@link Worker}. Durations in milliseconds. */
export interface WorkerOptions {
  /** The queues to lease from (1 to 32). */
  queues: string[];
  /** Handlers run at once = leases held at most = the stream's credits (1 to 10,000; default 1). */
  concurrency?: number;
  /** Names this worker in the server's logs and attempt records (default host-pid-random). Kept across reconnects. */
  workerId?: string;
  /** How long shutdown waits for held jobs before cancelling them (default 25,000; must be > 0). */
  shutdownGraceMs?: number;
  /** Drain on SIGTERM / SIGINT (default true); a second signal skips the rest of the grace. */
  handleSignals?: boolean;
  /** Heartbeat period (default 2,000, lowered to a third of the lease duration seen on leases). */
  heartbeatIntervalMs?: number;
  /** An ack or fail unanswered this long on the stream means the stream stalled: it is replaced (default 30,000). */
  stallTimeoutMs?: number;
  /** Reconnect backoff bounds (default 500 ms -> 30 s, full jitter). */
  reconnect?: BackoffOptions;
  /** Deadline of the unary Ack, Fail and ExtendLease calls (default 5,000). */
  rpcTimeoutMs?: number;
  /** Where the worker logs (default the client's logger). */
  logger?: Logger;
}

/** Counters, for tests and dashboards. */
export interface WorkerStats {
  /** Leases received. */
  leased: number;
  /** Results the server recorded (acks and fails). */
  settled: number;
  /** Results the server refused or that could not be recorded (lease lost, ...). */
  dropped: number;
  /** Handlers running now. */
  running: number;
  /** The most handlers that ran at once. */
  maxRunning: number;
  /** Leases held now (running or waiting for their result to be recorded). */
  held: number;
  /** Streams opened (the server accepted them). */
  streamsOpened: number;
  /** Leases renewed with ExtendLease after their stream ended. */
  extended: number;
}

type State = "idle" | "running" | "stopping" | "stopped";

/**
 * Leases jobs from `queues` and runs the handler registered for each job's name.
 *
 * ```ts
 * const worker = new Worker(client, { queues: ["emails"], concurrency: 10 });
 * worker.handle<{ to: string }>("send-welcome", async (job, ctx) => {
 *   await sendEmail(job.payload.to, { idempotencyKey: ctx.idempotencyKey, signal: ctx.signal });
 * });
 * await worker.run(); // until SIGTERM / SIGINT or worker.close()
 * ```
 */
export class Worker {
  readonly workerId: string;
  readonly queues: string[];
  readonly concurrency: number;
  readonly logger: Logger;
  private readonly opts: Required<Omit<WorkerOptions, "logger" | "workerId" | "queues" | "concurrency" | "reconnect">> & {
    reconnect: BackoffOptions;
  };
  private readonly handlers = new Map<string, Handler<never>>();
  private readonly held = new Map<string, HeldLease>();
  private stream: LeaseStream | undefined;
  private generation = 0;
  private state: State = "idle";
  /** Aborted when shutdown starts: wakes the reconnect loop's sleeps. */
  private readonly stopping = new AbortController();
  /** Woken when a slot frees or a lease is released. */
  private wakers: (() => void)[] = [];
  private streamEnded: ((st: StatusObject) => void) | undefined;
  private readonly liveness: Liveness;
  private readonly control: Control;
  private shutdown: Shutdown | undefined;
  /** Why run() rejects (the server refused the stream's open for good). */
  private fatal: Error | undefined;
  private readonly counters: WorkerStats = {
    leased: 0,
    settled: 0,
    dropped: 0,
    running: 0,
    maxRunning: 0,
    held: 0,
    streamsOpened: 0,
    extended: 0,
  };

  constructor(
    readonly client: Client,
    options: WorkerOptions,
  ) {
    if (options.queues.length === 0) throw new TypeError("a worker needs at least one queue");
    this.queues = [...options.queues];
    this.concurrency = options.concurrency ?? 1;
    if (!Number.isInteger(this.concurrency) || this.concurrency < 1 || this.concurrency > 10_000) {
      throw new RangeError(`concurrency must be an integer in [1, 10000], got ${options.concurrency}`);
    }
    const grace = options.shutdownGraceMs ?? 25_000;
    if (!(grace > 0)) throw new RangeError(`shutdownGraceMs must be > 0 (a grace of 0 kills in-flight work), got ${grace}`);
    this.workerId = options.workerId ?? `${hostname()}-${process.pid}-${randomBytes(3).toString("hex")}`;
    this.logger = options.logger ?? client.logger;
    this.opts = {
      shutdownGraceMs: grace,
      handleSignals: options.handleSignals ?? true,
      heartbeatIntervalMs: options.heartbeatIntervalMs ?? 2_000,
      stallTimeoutMs: options.stallTimeoutMs ?? 30_000,
      rpcTimeoutMs: options.rpcTimeoutMs ?? 5_000,
      reconnect: options.reconnect ?? {},
    };
    this.liveness = new Liveness(this.opts.heartbeatIntervalMs, this.opts.stallTimeoutMs, this.logger, () => this.stream);
    this.control = new Control(client.stubs.workers, () => this.stream, this.opts.rpcTimeoutMs, this.logger);
  }

  /**
   * Registers the handler of jobs named `name` (one per name; a later one replaces it). The
   * handler resolves to ack; it throws {@link NonRetryable}, {@link RetryAfter},
   * {@link RateLimited} or any other error to fail the attempt (see errors.ts).
   */
  handle<T = unknown>(name: string, handler: Handler<T>): this {
    this.handlers.set(name, handler);
    return this;
  }

  /** A snapshot of the worker's counters. */
  stats(): WorkerStats {
    return { ...this.counters, held: this.held.size };
  }

  /**
   * Runs until {@link close} (or SIGTERM / SIGINT) has drained the worker. Resolves then;
   * rejects on misuse (no handler, run twice) and when the server refuses the stream's open
   * as INVALID_ARGUMENT (a bad queue name), UNAUTHENTICATED (no or a wrong token) or
   * PERMISSION_DENIED (the token may not lease from a queue): no retry can help, and the
   * error has the status as `code`. Other ends of the stream (UNAVAILABLE, ...) are retried
   * with backoff and logged.
   */
  async run(): Promise<void> {
    if (this.state !== "idle") throw new Error("Worker.run() was already called");
    if (this.handlers.size === 0) throw new Error("register a handler with worker.handle(name, fn) before run()");
    this.state = "running";
    this.shutdown = new Shutdown(this.opts.shutdownGraceMs, this.logger, this.opts.handleSignals, () => this.close());
    this.liveness.start();
    this.logger.info(
      { workerId: this.workerId, queues: this.queues, concurrency: this.concurrency },
      "worker started",
    );
    await this.connectLoop();
    await this.shutdown.done;
    if (this.fatal) throw this.fatal;
  }

  /**
   * Graceful shutdown: Drain, wait for held jobs up to the grace, then abort the handlers'
   * signals and hand what is left back uncharged (RELEASE). Resolves when the worker stopped.
   */
  async close(): Promise<void> {
    if (this.state === "idle") {
      this.state = "stopped";
      return;
    }
    const sd = this.shutdown;
    if (sd === undefined) return;
    if (this.state === "running") {
      this.state = "stopping";
      this.stopping.abort();
      this.wake();
      void sd.run({
        drain: () => this.stream?.drain(),
        idle: () => this.held.size === 0,
        waitChange: () => this.changed(),
        abandon: () => this.abandonAll(),
        finish: () => this.finish(),
        held: () => this.held.size,
      });
    }
    await sd.done;
  }

  private isStopped(): boolean {
    return this.state === "stopped";
  }

  // === the stream ===

  private freeSlots(): number {
    return this.concurrency - this.held.size;
  }

  private changed(): Promise<void> {
    return new Promise((resolve) => this.wakers.push(resolve));
  }

  private wake(): void {
    if (this.wakers.length === 0) return;
    const w = this.wakers;
    this.wakers = [];
    for (const f of w) f();
  }

  private async connectLoop(): Promise<void> {
    let failures = 0;
    while (this.state === "running") {
      while (this.state === "running" && this.freeSlots() <= 0) await this.changed();
      if (this.state !== "running") break;
      const credits = this.freeSlots();
      const ended = new Promise<StatusObject>((resolve) => (this.streamEnded = resolve));
      this.stream = new LeaseStream(
        this.client.stubs.workers,
        ++this.generation,
        { queues: this.queues, credits, workerId: this.workerId },
        this.events,
      );
      const stream = this.stream;
      const st = await ended;
      if (stream.opened) failures = 0;
      if (this.state !== "running") break;
      if (!stream.opened && REFUSED_FOR_GOOD.has(st.code)) {
        // The open itself is wrong (a bad queue name, too many queues, no or a wrong token, a
        // token without the queue): no retry can help.
        this.fatal = Object.assign(new Error(`the server refused the worker's stream: ${st.details}`), { code: st.code });
        this.logger.error({ workerId: this.workerId, details: st.details }, "the server refused the worker's stream; stopping");
        void this.close();
        break;
      }
      const delay = Math.round(fullJitter(failures++, this.opts.reconnect));
      this.logger.warn(
        { workerId: this.workerId, code: st.code, details: st.details, held: this.held.size, retryInMs: delay },
        stream.serverDraining ? "the server drained the stream; reconnecting" : "worker stream ended; reconnecting",
      );
      await sleep(delay, this.stopping.signal);
    }
  }

  private readonly events: StreamEvents = {
    onOpen: (s) => {
      this.counters.streamsOpened++;
      this.logger.info({ workerId: this.workerId, generation: s.generation }, "worker stream open");
      if (this.state === "stopping") s.drain();
      // The server is reachable again: renew the leases of the streams before this one now.
      for (const h of this.held.values()) if (h.generation !== s.generation) this.keep(h, true);
      // Results that waited for a stream go out on this one.
      for (const h of this.held.values()) if (h.outcome !== undefined && !h.settling) this.settle(h);
    },
    onLease: (s, lease) => this.onLease(s, lease),
    onSettled: (s, st) => this.onSettled(s, st),
    onDraining: (s, d: Draining) => {
      this.logger.info(
        { workerId: this.workerId, generation: s.generation, graceMs: (d.grace?.seconds ?? 0) * 1000 },
        "the server is draining: finishing held jobs, no more leases on this stream",
      );
    },
    onCancel: (_s, c) => this.control.onCancel(this.held.get(leaseKey(c.queue, c.jobId, c.leaseToken)), c),
    onProgressSaved: (_s, p) => this.control.onSaved(p),
    onEnd: (s, st) => this.onStreamEnd(s, st),
  };

  private onStreamEnd(s: LeaseStream, st: StatusObject): void {
    this.control.streamEnded(s.generation);
    for (const h of this.held.values()) {
      // Its settle may or may not have been applied: send it again (a duplicate is refused
      // as lease lost, which is then the truth: the first one was recorded).
      if (h.settling && h.settleGeneration === s.generation) {
        h.settling = false;
        this.settle(h);
      }
      if (h.generation === s.generation) this.keep(h);
    }
    if (s === this.stream && this.streamEnded) {
      this.streamEnded(st);
      this.streamEnded = undefined;
    }
  }

  // === leases ===

  private onLease(s: LeaseStream, lease: Lease): void {
    const job = lease.job;
    const key = leaseKey(job?.queue ?? "", job?.jobId ?? "", lease.leaseToken);
    const leaseMs = lease.leaseDeadline ? Math.max(0, lease.leaseDeadline.getTime() - Date.now()) : 0;
    const h = new HeldLease(key, lease, s.generation, leaseMs);
    this.held.set(key, h);
    this.counters.leased++;
    this.counters.running++;
    this.counters.maxRunning = Math.max(this.counters.maxRunning, this.counters.running);
    if (this.counters.running > this.concurrency) {
      this.logger.error({ running: this.counters.running, concurrency: this.concurrency }, "more leases than slots (bug)");
    }
    this.liveness.sawLease(leaseMs);
    const handler = this.handlers.get(job?.name ?? "") as Handler<unknown> | undefined;
    const run: Handler<unknown> =
      handler ??
      (() => {
        throw Object.assign(new Error(`no handler registered for job name ${JSON.stringify(job?.name)}`), {
          errorType: "no_handler",
        });
      });
    void invoke(run, lease, {
      signal: () => h.signal,
      workerId: this.workerId,
      logger: this.logger,
      report: (req) => this.control.report(h, req),
      cancelled: () => h.cancelled,
    }).then((outcome) => this.onOutcome(h, outcome));
  }

  private onOutcome(h: HeldLease, outcome: Outcome): void {
    // After a cancel, what the handler did is settled as usual: a Fail (its abort is recorded
    // as `cancelled` by invoke) ends the job CANCELLED, an Ack ("it finished anyway") COMPLETED.
    h.running = false;
    this.counters.running--;
    if (h.abandoned) {
      this.logger.info({ jobId: h.jobId }, "a handler cancelled at shutdown returned; its attempt was already failed");
      return;
    }
    if (outcome.kind === "fail") {
      this.logger.warn(
        { jobId: h.jobId, queue: h.queue, attempt: h.lease.attempt, errorType: outcome.failure.error.errorType, error: outcome.failure.error.message },
        "job attempt failed",
      );
    }
    h.outcome = outcome;
    if (h.lost) {
      this.drop(h, "the lease was lost while the handler ran (another worker may hold the job): result dropped");
      return;
    }
    this.settle(h);
  }

  /** Sends `h`'s result: on the live stream, else with the unary call (retried while unreachable). */
  private settle(h: HeldLease): void {
    const outcome = h.outcome;
    if (outcome === undefined || h.settling || h.released || this.isStopped()) return;
    const s = this.stream;
    if (s?.usable) {
      const sent =
        outcome.kind === "ack"
          ? s.ack(h.queue, h.jobId, h.token, outcome.result)
          : s.fail(h.queue, h.jobId, h.token, outcome.failure);
      if (sent) {
        h.settling = true;
        h.settleGeneration = s.generation;
        return;
      }
    }
    h.settling = true;
    h.settleGeneration = 0;
    void settleUnary(this.client.stubs.workers, h, outcome, this.opts.rpcTimeoutMs).then(({ result, error }) => {
      h.settling = false;
      if (result === "recorded") return this.release(h, true);
      if (this.resultRefused(h, error?.code ?? 0, error?.details ?? "")) return this.settle(h);
      if (result === "lost") return this.drop(h, `lease lost, result dropped (${error?.details ?? ""})`);
      if (result === "refused") {
        this.logger.error({ jobId: h.jobId, code: error?.code, details: error?.details }, "the server refused the result");
        return this.release(h, false);
      }
      const delay = Math.round(fullJitter(h.settleFailures++, { baseMs: 250, capMs: 5_000 }));
      this.logger.warn(
        { jobId: h.jobId, code: error?.code, details: error?.details, retryInMs: delay },
        "could not reach the server to record a result; keeping it and retrying",
      );
      setTimeout(() => this.settle(h), delay);
    });
  }

  private onSettled(s: LeaseStream, st: Settled): void {
    const h = this.held.get(leaseKey(st.queue, st.jobId, st.leaseToken));
    if (h === undefined || !h.settling || h.settleGeneration !== s.generation) return;
    h.settling = false;
    if (st.code === 0) return this.release(h, true);
    if (this.resultRefused(h, st.code, st.message)) return this.settle(h);
    if (st.code === 9) return this.drop(h, `lease lost, result dropped (${st.message})`);
    if (st.code === 14) {
      const delay = Math.round(fullJitter(h.settleFailures++, { baseMs: 250, capMs: 5_000 }));
      this.logger.warn({ jobId: h.jobId, retryInMs: delay, message: st.message }, "the server could not record a result; retrying");
      setTimeout(() => this.settle(h), delay);
      return;
    }
    this.logger.error({ jobId: h.jobId, code: st.code, message: st.message }, "the server refused the result");
    this.release(h, false);
  }

  /**
   * An Ack refused for its result (RESOURCE_EXHAUSTED: over the server's result limit; the job
   * is still leased) becomes a NO_RETRY Fail (error type `result_too_large`) to send instead,
   * so the job is dead-lettered with the reason rather than left leased.
   */
  private resultRefused(h: HeldLease, code: number, message: string): boolean {
    const o = h.outcome;
    if (code !== Number(grpcStatus.RESOURCE_EXHAUSTED) || o?.kind !== "ack" || o.result === undefined) return false;
    this.logger.error({ jobId: h.jobId, queue: h.queue, bytes: o.result.length, message }, "the server refused the job's result; failing the job");
    h.outcome = { kind: "fail", failure: resultTooLarge(message) };
    return true;
  }

  private drop(h: HeldLease, why: string): void {
    this.logger.warn({ jobId: h.jobId, queue: h.queue, attempt: h.lease.attempt }, why);
    this.release(h, false);
  }

  /** `h` needs nothing more: its slot is free (a credit is granted if no stream's book holds it). */
  private release(h: HeldLease, recorded: boolean): void {
    if (h.released) return;
    h.released = true;
    if (h.keeper) clearTimeout(h.keeper);
    this.held.delete(h.key);
    if (recorded) this.counters.settled++;
    else this.counters.dropped++;
    const s = this.stream;
    if (s && !s.ended && h.generation !== s.generation && this.state === "running") s.grant(1);
    this.wake();
  }

  /**
   * Renews `h`'s lease with ExtendLease until it is settled (its stream is gone, and the
   * server renews only the leases of a live stream). `now`: renew at once (a stream opened:
   * the server is reachable again), not at the next tick.
   */
  private keep(h: HeldLease, now = false): void {
    if (h.released || h.lost || h.extending) return;
    if (h.keeper !== undefined) {
      if (!now) return;
      clearTimeout(h.keeper);
    }
    void this.extendTick(h);
  }

  private async extendTick(h: HeldLease): Promise<void> {
    await renewOnce(h, {
      stub: this.client.stubs.workers,
      timeoutMs: this.opts.rpcTimeoutMs,
      stopped: () => this.isStopped(),
      extended: (next) => {
        this.counters.extended++;
        this.logger.debug({ jobId: h.jobId, nextInMs: next }, "lease extended");
      },
      lost: (details) => {
        this.logger.warn({ jobId: h.jobId, details }, "lease lost (ExtendLease refused): the handler is signalled");
        if (!h.running && !h.settling) this.drop(h, "lease lost before its result was recorded: result dropped");
      },
      again: () => void this.extendTick(h),
    });
  }

  // === shutdown ===

  /** The grace is over: cancel every running handler and hand its job back uncharged. */
  private abandonAll(): void {
    for (const h of this.held.values()) {
      if (!h.running || h.abandoned) continue;
      h.abandoned = true;
      h.cancel(new Error("worker shutdown: grace over"));
      h.outcome = { kind: "fail", failure: shutdownFailure(this.opts.shutdownGraceMs) };
      this.settle(h);
    }
  }

  /** Closes the stream and stops every timer. */
  private async finish(): Promise<void> {
    const s = this.stream;
    if (s && !s.ended) {
      const ended = new Promise<void>((resolve) => {
        const prev = this.streamEnded;
        this.streamEnded = (st) => {
          prev?.(st);
          resolve();
        };
      });
      s.end();
      const stop = new AbortController();
      await Promise.race([ended, sleep(5_000, stop.signal)]);
      stop.abort();
      s.cancel();
    }
    // A lease the server sent just before it read the Drain may arrive after the worker went
    // idle: it runs, and its result goes out with the unary call.
    const until = Date.now() + 10_000;
    while (this.held.size > 0 && Date.now() < until) {
      const stop = new AbortController();
      await Promise.race([this.changed(), sleep(until - Date.now(), stop.signal)]);
      stop.abort();
    }
    for (const h of this.held.values()) {
      if (h.keeper) clearTimeout(h.keeper);
      this.logger.error(
        { jobId: h.jobId, queue: h.queue, attempt: h.lease.attempt },
        "the worker stopped before this lease's result was recorded: the lease expires and the job is retried",
      );
    }
    this.state = "stopped";
    this.control.close();
    this.liveness.stop();
    this.wake();
    this.logger.info({ workerId: this.workerId, ...this.stats() }, "worker stopped");
  }
}
