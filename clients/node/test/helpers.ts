/** Shared by the tests: a server per test file, unique queue names, polling with a deadline. */
import { randomBytes } from "node:crypto";
import { Client, silentLogger, consoleLogger, type ClientOptions } from "../src/index.js";
import { startJobwire, type JobwireOptions, type JobwireServer } from "../src/testing/index.js";

/** A queue name no other test uses. */
export function uniqueQueue(slug: string): string {
  return `${slug}-${randomBytes(4).toString("hex")}`;
}

/** The SDK's logs only when JOBWIRE_TEST_LOG is set (they would drown node:test's report). */
export const testLogger = process.env.JOBWIRE_TEST_LOG ? consoleLogger("debug") : silentLogger;

/** A server and a client on it. */
export async function serverAndClient(o: JobwireOptions = {}, c: ClientOptions = {}): Promise<{ server: JobwireServer; client: Client }> {
  const server = await startJobwire(o);
  const client = new Client(server.target, { logger: testLogger, ...c });
  return { server, client };
}

/** Polls `probe` until it returns a value other than undefined; throws after `timeoutMs`. */
export async function eventually<T>(what: string, probe: () => Promise<T | undefined> | T | undefined, timeoutMs = 20_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await probe();
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

export const delay = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
