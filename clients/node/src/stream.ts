/**
 * One WorkerService.Subscribe stream: opens it, sends acks, fails, heartbeats, credits and
 * drain, and hands what the server sends (leases, settled replies, draining) to the worker.
 * It knows nothing about handlers or slots; the {@link Worker} owns those and replaces the
 * stream when it ends.
 */
import * as grpc from "@grpc/grpc-js";
import { msToDuration } from "./convert.js";
import type { Failure } from "./errors.js";
import type {
  CancelLease,
  Draining,
  Lease,
  ProgressSaved,
  ReportProgressRequest,
  Settled,
  SubscribeRequest,
  SubscribeResponse,
  WorkerServiceClient,
} from "./gen/jobwire/v1/worker_service.js";

/** What a stream reports to its owner. */
export interface StreamEvents {
  /** The server accepted the stream (its response headers arrived). */
  onOpen(s: LeaseStream): void;
  onLease(s: LeaseStream, lease: Lease): void;
  onSettled(s: LeaseStream, settled: Settled): void;
  onDraining(s: LeaseStream, d: Draining): void;
  /** The job held under a lease of this stream was cancelled. */
  onCancel(s: LeaseStream, c: CancelLease): void;
  /** The answer to a progress report sent on this stream. */
  onProgressSaved(s: LeaseStream, p: ProgressSaved): void;
  /** The stream ended: `status` is its final gRPC status (OK after a clean close). */
  onEnd(s: LeaseStream, status: grpc.StatusObject): void;
}

/**
 * The key of a lease: queue, lease token and job id. Unambiguous with NUL separators: queue
 * names are [A-Za-z0-9._-] and the job id comes last.
 */
export function leaseKey(queue: string, jobId: string, token: string): string {
  return `${queue}\u0000${token}\u0000${jobId}`;
}

/** One open Subscribe call. */
export class LeaseStream {
  /** Whether the server accepted it (headers received). */
  opened = false;
  /** Whether it ended (its status arrived). */
  ended = false;
  /** Whether this worker half-closed it (nothing more can be written). */
  private halfClosed = false;
  /** Whether the server said Draining on it. */
  serverDraining = false;
  /** Whether this worker sent Drain on it. */
  drainSent = false;
  /** Acks and fails sent on it and not yet answered by a Settled: key -> when sent (ms). */
  readonly unanswered = new Map<string, number>();
  /** When something was last written (ms since the epoch). */
  lastWrite = 0;
  private readonly call: grpc.ClientDuplexStream<SubscribeRequest, SubscribeResponse>;

  constructor(
    stub: WorkerServiceClient,
    readonly generation: number,
    open: { queues: string[]; credits: number; workerId: string },
    private readonly events: StreamEvents,
  ) {
    this.call = stub.subscribe();
    this.call.on("metadata", () => {
      this.opened = true;
      events.onOpen(this);
    });
    this.call.on("data", (m: SubscribeResponse) => this.dispatch(m));
    // Errors also arrive as the final status; the listener keeps them from being thrown.
    this.call.on("error", () => undefined);
    this.call.on("status", (st: grpc.StatusObject) => {
      if (this.ended) return;
      this.ended = true;
      events.onEnd(this, st);
    });
    this.write({ message: { $case: "open", open } });
  }

  private dispatch(m: SubscribeResponse): void {
    const msg = m.message;
    if (msg === undefined) return;
    switch (msg.$case) {
      case "lease":
        this.events.onLease(this, msg.lease);
        break;
      case "settled":
        this.unanswered.delete(leaseKey(msg.settled.queue, msg.settled.jobId, msg.settled.leaseToken));
        this.events.onSettled(this, msg.settled);
        break;
      case "draining":
        this.serverDraining = true;
        this.events.onDraining(this, msg.draining);
        break;
      case "cancel":
        this.events.onCancel(this, msg.cancel);
        break;
      case "progressSaved":
        this.events.onProgressSaved(this, msg.progressSaved);
        break;
    }
  }

  private write(req: SubscribeRequest): boolean {
    if (this.ended || this.halfClosed) return false;
    this.lastWrite = Date.now();
    this.call.write(req);
    return true;
  }

  /** Whether acks and fails can go out on it. */
  get usable(): boolean {
    return this.opened && !this.ended && !this.halfClosed;
  }

  /** Acks on the stream (with the handler's result bytes, if any); false when the stream is no longer usable. */
  ack(queue: string, jobId: string, leaseToken: string, result?: Buffer): boolean {
    if (!this.usable) return false;
    this.unanswered.set(leaseKey(queue, jobId, leaseToken), Date.now());
    return this.write({ message: { $case: "ack", ack: { queue, jobId, leaseToken, result: result ?? Buffer.alloc(0) } } });
  }

  /** Sends a progress report (answered by a ProgressSaved); false when the stream is no longer usable. */
  progress(req: ReportProgressRequest): boolean {
    if (!this.usable) return false;
    return this.write({ message: { $case: "progress", progress: req } });
  }

  /** Fails on the stream; false when the stream is no longer usable. */
  fail(queue: string, jobId: string, leaseToken: string, f: Failure): boolean {
    if (!this.usable) return false;
    this.unanswered.set(leaseKey(queue, jobId, leaseToken), Date.now());
    return this.write({
      message: {
        $case: "fail",
        fail: {
          queue,
          jobId,
          leaseToken,
          disposition: f.disposition,
          error: f.error,
          retryAfter: f.retryAfterMs === undefined ? undefined : msToDuration(f.retryAfterMs),
          pauseQueue: f.pauseQueue,
          pauseGroup: f.pauseGroup ?? false,
        },
      },
    });
  }

  /** Says the worker is alive (the server renews the stream's leases while it hears from it). */
  heartbeat(): void {
    if (this.usable) this.write({ message: { $case: "heartbeat", heartbeat: {} } });
  }

  /** Grants `n` more credits (a slot freed by a lease this stream does not hold). */
  grant(n: number): void {
    if (this.usable && n > 0) this.write({ message: { $case: "grantCredits", grantCredits: { credits: n } } });
  }

  /** Asks for no more leases. */
  drain(): void {
    if (this.drainSent || this.ended) return;
    this.drainSent = true;
    this.write({ message: { $case: "drain", drain: {} } });
  }

  /** Half-closes: the server ends the stream once it has answered what was sent. */
  end(): void {
    if (this.ended || this.halfClosed) return;
    this.halfClosed = true;
    this.call.end();
  }

  /** Cancels the call at once (the status becomes CANCELLED). */
  cancel(): void {
    if (!this.ended) this.call.cancel();
  }

  /** The age in ms of the oldest ack or fail still waiting for its Settled (0 when none). */
  oldestUnansweredMs(now: number): number {
    let oldest = 0;
    for (const t of this.unanswered.values()) oldest = Math.max(oldest, now - t);
    return oldest;
  }
}
