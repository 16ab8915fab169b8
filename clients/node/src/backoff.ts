/**
 * Reconnect delays: exponential backoff with "full jitter" (AWS Architecture Blog,
 * "Exponential Backoff And Jitter", 2015): the n-th retry (0-based) sleeps a uniform random
 * time in [0, min(cap, base * 2^n)], which spreads a crowd of workers reconnecting to a server
 * that came back instead of having them all knock at once.
 */

/** The reconnect backoff's bounds, in milliseconds. */
export interface BackoffOptions {
  /** The first retry's upper bound (default 500 ms). */
  baseMs?: number;
  /** The largest upper bound (default 30,000 ms). */
  capMs?: number;
}

/** The delay before retry number `n` (0-based): uniform in [0, min(cap, base * 2^n)]. */
export function fullJitter(n: number, opts: BackoffOptions = {}, random: () => number = Math.random): number {
  const base = opts.baseMs ?? 500;
  const cap = opts.capMs ?? 30_000;
  const bound = Math.min(cap, base * 2 ** Math.min(n, 30));
  return random() * bound;
}

/** Resolves after `ms`, or at once when `signal` aborts (never rejects). */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const t = setTimeout(done, ms);
    function done(): void {
      clearTimeout(t);
      signal?.removeEventListener("abort", done);
      resolve();
    }
    signal?.addEventListener("abort", done, { once: true });
  });
}
