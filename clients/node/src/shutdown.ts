/**
 * The worker's graceful shutdown: SIGTERM / SIGINT handling (one signal drains, a second one
 * skips the rest of the grace, as restate and linkerd treat a repeated signal) and the drain
 * sequence with its grace. Temporal's SDKs defaulted the grace to 0 and killed in-flight work
 * on every deploy; here it defaults to 25 s and must be above 0.
 */
import { sleep } from "./backoff.js";
import type { Failure } from "./errors.js";
import { FailDisposition } from "./gen/jobwire/v1/job.js";
import type { Logger } from "./logger.js";

/** The worker's side of the drain sequence. */
export interface DrainSteps {
  /** Ask the server for no more leases. */
  drain(): void;
  /** Whether every held lease is settled. */
  idle(): boolean;
  /** Resolves when something may have changed (a lease released). */
  waitChange(): Promise<void>;
  /** The grace is over: cancel the handlers and hand their jobs back uncharged (RELEASE). */
  abandon(): void;
  /** Close the stream and stop the timers. */
  finish(): Promise<void>;
  /** How many leases are held. */
  held(): number;
}

/**
 * The Fail of an attempt still running when the grace ran out: RELEASE, which hands the job
 * back to waiting at once without charging the attempt (as the server's own drain does), so a
 * deploy never dead-letters work; the error is for the server's log only.
 */
export function shutdownFailure(graceMs: number): Failure {
  return {
    disposition: FailDisposition.FAIL_DISPOSITION_RELEASE,
    error: {
      message: `the worker shut down before the handler finished (grace ${graceMs} ms)`,
      errorType: "worker_shutdown",
      details: "",
    },
    pauseQueue: false,
  };
}

/** How long shutdown waits for the fails of abandoned handlers to be recorded. */
const ABANDON_WAIT_MS = 10_000;

/** One worker's shutdown: its signal handlers and its drain. */
export class Shutdown {
  /** Resolves when the worker stopped. */
  readonly done: Promise<void>;
  private resolveDone!: () => void;
  private hurried = false;
  private hurry = new AbortController();
  private signals = 0;
  private readonly onSignal = (sig: NodeJS.Signals): void => {
    this.signals++;
    if (this.signals === 1) {
      this.logger.info({ signal: sig, graceMs: this.graceMs }, "signal received: draining the worker");
      void this.close();
    } else {
      this.logger.warn({ signal: sig }, "second signal: cancelling the running handlers now");
      this.hurried = true;
      this.hurry.abort();
    }
  };

  constructor(
    private readonly graceMs: number,
    private readonly logger: Logger,
    private readonly handleSignals: boolean,
    private readonly close: () => Promise<void>,
  ) {
    this.done = new Promise((resolve) => (this.resolveDone = resolve));
    if (handleSignals) {
      process.on("SIGTERM", this.onSignal);
      process.on("SIGINT", this.onSignal);
    }
  }

  private async waitIdle(steps: DrainSteps, ms: number, hurry: AbortSignal | undefined): Promise<void> {
    const deadline = Date.now() + ms;
    while (!steps.idle() && Date.now() < deadline && !hurry?.aborted) {
      const stop = new AbortController();
      const signal = hurry ? AbortSignal.any([stop.signal, hurry]) : stop.signal;
      await Promise.race([steps.waitChange(), sleep(deadline - Date.now(), signal)]);
      stop.abort();
    }
  }

  /** Drain, wait up to the grace, abandon what is left, finish. */
  async run(steps: DrainSteps): Promise<void> {
    try {
      steps.drain();
      this.logger.info({ held: steps.held(), graceMs: this.graceMs }, "worker draining");
      await this.waitIdle(steps, this.graceMs, this.hurried ? undefined : this.hurry.signal);
      if (!steps.idle()) {
        this.logger.warn(
          { held: steps.held(), graceMs: this.graceMs },
          "shutdown grace over: cancelling the running handlers and handing their jobs back uncharged",
        );
        steps.abandon();
        await this.waitIdle(steps, ABANDON_WAIT_MS, undefined);
      }
      await steps.finish();
    } finally {
      if (this.handleSignals) {
        process.off("SIGTERM", this.onSignal);
        process.off("SIGINT", this.onSignal);
      }
      this.resolveDone();
    }
  }
}
