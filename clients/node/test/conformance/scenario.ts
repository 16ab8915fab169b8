/** A scenario of clients/conformance/scenarios.json and what its tests share. */
import { Client, pb, Worker, type WorkerOptions } from "../../src/index.js";
import { startJobwire, type JobwireOptions, type JobwireServer } from "../../src/testing/index.js";
import { eventually, testLogger } from "../helpers.js";

export interface Scenario {
  id: string;
  what: string;
  /** Extra `jobwire serve` flags. */
  server: string[];
  /** Numbers the test uses; durations in ms. */
  params: Record<string, number>;
}

export type ScenarioTest = (s: Scenario) => Promise<void>;

/** The scenario's numeric parameter `name` (fails loudly when the file lacks it). */
export function param(s: Scenario, name: string): number {
  const v = s.params[name];
  if (typeof v !== "number") throw new Error(`scenario ${s.id} has no numeric params.${name}`);
  return v;
}

/** Runs `body` with a fresh server (the scenario's flags) and a client, then stops both. */
export async function withServer(
  s: Scenario,
  body: (server: JobwireServer, client: Client) => Promise<void>,
  o: JobwireOptions = {},
  target?: (server: JobwireServer) => Promise<string> | string,
): Promise<void> {
  const server = await startJobwire({ ...o, args: [...s.server, ...(o.args ?? [])] });
  const client = new Client(target ? await target(server) : server.target, { logger: testLogger });
  try {
    await body(server, client);
  } finally {
    client.close();
    await server.stop();
  }
}

/** A worker on `queues` that does not take the process's signals. */
export function worker(client: Client, o: Omit<WorkerOptions, "handleSignals">): Worker {
  return new Worker(client, { handleSignals: false, logger: testLogger, ...o });
}

/** Waits until the job reaches `state` and returns it. */
export function untilState(client: Client, queue: string, id: string, state: pb.JobState, timeoutMs = 30_000): Promise<pb.Job> {
  return eventually(
    `${id} in state ${pb.JobState[state]}`,
    async () => {
      const j = await client.getJob(queue, id);
      return j.state === state ? j : undefined;
    },
    timeoutMs,
  );
}

/** Resolves after `ms`, unless `signal` aborts first (then rejects). */
export function work(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    const t = setTimeout(resolve, ms);
    signal.addEventListener("abort", () => {
      clearTimeout(t);
      reject(signal.reason instanceof Error ? signal.reason : new Error("aborted"));
    });
  });
}
