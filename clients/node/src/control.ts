/**
 * Job control on the worker's side: the progress reports of the held leases (sent on the live
 * stream, each awaiting its ProgressSaved; with the unary ReportProgress when no stream is
 * usable, or when the stream ends before it answered: saving the same values twice is
 * harmless), and the server's CancelLease turned into the handler's aborted signal.
 */
import * as grpc from "@grpc/grpc-js";
import { callOnce, hasCode } from "./channel.js";
import { JobCancelled, LeaseLost, reportError } from "./errors.js";
import type { CancelLease, ProgressSaved, ReportProgressRequest, WorkerServiceClient } from "./gen/jobwire/v1/worker_service.js";
import type { HeldLease } from "./held.js";
import type { Logger } from "./logger.js";
import { leaseKey, type LeaseStream } from "./stream.js";

/** A report sent on stream `generation`, awaiting its ProgressSaved. */
interface Pending {
  req: ReportProgressRequest;
  generation: number;
  resolve: () => void;
  reject: (e: Error) => void;
}

/** The progress reports in flight and the cancels of one worker. */
export class Control {
  private readonly waiting = new Map<string, Pending[]>();

  constructor(
    private readonly stub: WorkerServiceClient,
    private readonly stream: () => LeaseStream | undefined,
    private readonly timeoutMs: number,
    private readonly logger: Logger,
  ) {}

  /** Sends `req` for `h` and resolves once the server saved it (see JobContext.report). */
  async report(h: HeldLease, req: ReportProgressRequest): Promise<void> {
    if (h.lost || h.released) throw new LeaseLost("lease lost");
    try {
      const s = this.stream();
      if (s?.usable) {
        await new Promise<void>((resolve, reject) => {
          const key = leaseKey(req.queue, req.jobId, req.leaseToken);
          const list = this.waiting.get(key) ?? [];
          list.push({ req, generation: s.generation, resolve, reject });
          this.waiting.set(key, list);
          if (!s.progress(req)) this.resend(key, s.generation);
        });
        return;
      }
      await this.unary(req);
    } catch (e) {
      if (e instanceof LeaseLost && !h.lost) {
        this.logger.warn({ jobId: h.jobId, queue: h.queue }, "lease lost (a progress report was refused): the handler is signalled");
        h.lost = true;
        h.cancel(e);
      }
      throw e;
    }
  }

  /** The server's answer to the oldest report of that lease sent on the stream. */
  onSaved(p: ProgressSaved): void {
    const key = leaseKey(p.queue, p.jobId, p.leaseToken);
    const list = this.waiting.get(key);
    const first = list?.shift();
    if (list?.length === 0) this.waiting.delete(key);
    if (first === undefined) return;
    if (p.code === 0) first.resolve();
    else first.reject(reportError(p.code, p.message));
  }

  /** Stream `generation` ended: what it did not answer goes out with ReportProgress. */
  streamEnded(generation: number): void {
    for (const key of [...this.waiting.keys()]) this.resend(key, generation);
  }

  private resend(key: string, generation: number): void {
    const list = this.waiting.get(key) ?? [];
    const kept = list.filter((p) => p.generation > generation);
    if (kept.length > 0) this.waiting.set(key, kept);
    else this.waiting.delete(key);
    for (const p of list) {
      if (p.generation <= generation) this.unary(p.req).then(p.resolve, p.reject);
    }
  }

  private async unary(req: ReportProgressRequest): Promise<void> {
    for (let tries = 0; ; tries++) {
      try {
        await callOnce(this.stub.reportProgress.bind(this.stub), req, this.timeoutMs);
        return;
      } catch (e) {
        const err = e as grpc.ServiceError;
        if (tries < 4 && hasCode(e, grpc.status.UNAVAILABLE)) {
          await new Promise((r) => setTimeout(r, 100 * 2 ** tries));
          continue;
        }
        throw reportError(err.code, err.details);
      }
    }
  }

  /** The server cancelled the job held as `h`: abort its handler's signal. */
  onCancel(h: HeldLease | undefined, c: CancelLease): void {
    if (h === undefined || !h.running || h.cancelled !== undefined) return;
    h.cancelled = new JobCancelled(c.reason, c.revokeTime);
    this.logger.info({ jobId: c.jobId, queue: c.queue, reason: c.reason }, "job cancelled: its handler is signalled");
    h.cancel(h.cancelled);
  }

  /** The worker stopped: reports still waiting reject with LeaseLost. */
  close(): void {
    for (const list of this.waiting.values()) {
      for (const p of list) p.reject(new LeaseLost("the worker stopped before the report was answered"));
    }
    this.waiting.clear();
  }
}
