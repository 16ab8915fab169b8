/**
 * The worker's liveness timer: heartbeats on the open stream (the server renews a stream's
 * leases while it hears from it within its --heartbeat-timeout), the stall watchdog (a stream
 * whose acks and fails go unanswered is replaced), and a warning when the event loop was
 * blocked long enough for heartbeats to be late (a CPU-bound handler starves the stream; the
 * lesson of Hatchet's zombie workers is that liveness must come from the stream itself).
 */
import type { Logger } from "./logger.js";
import type { LeaseStream } from "./stream.js";

/** How often the timer looks at most (ms). */
const TICK_MS = 250;

export class Liveness {
  /** The heartbeat period in force: the configured one, lowered to a third of the leases seen. */
  private periodMs: number;
  private timer: NodeJS.Timeout | undefined;
  private lastTick = 0;

  constructor(
    private readonly configuredMs: number,
    private readonly stallTimeoutMs: number,
    private readonly logger: Logger,
    private readonly stream: () => LeaseStream | undefined,
  ) {
    this.periodMs = configuredMs;
  }

  /** A lease ran `leaseMs` when granted: heartbeat at least three times within it. */
  sawLease(leaseMs: number): void {
    if (leaseMs > 0) this.periodMs = Math.max(100, Math.min(this.configuredMs, leaseMs / 3));
  }

  start(): void {
    this.lastTick = Date.now();
    this.schedule();
  }

  stop(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
  }

  private schedule(): void {
    this.timer = setTimeout(() => this.tick(), Math.min(this.periodMs, TICK_MS));
  }

  private tick(): void {
    const now = Date.now();
    const late = now - this.lastTick - Math.min(this.periodMs, TICK_MS);
    if (late > Math.max(1_000, this.periodMs)) {
      this.logger.warn({ blockedMs: late }, "the event loop was blocked: heartbeats were late and leases may expire");
    }
    this.lastTick = now;
    const s = this.stream();
    if (s?.usable) {
      // Any message renews; a heartbeat only when nothing else went out for a period.
      if (now - s.lastWrite >= this.periodMs * 0.9) s.heartbeat();
      if (s.oldestUnansweredMs(now) > this.stallTimeoutMs) {
        this.logger.warn({ generation: s.generation, stallTimeoutMs: this.stallTimeoutMs }, "the stream stalled (results unanswered); replacing it");
        s.cancel();
      }
    }
    this.schedule();
  }
}
