/**
 * The end-to-end no-op throughput, as `jobwire bench --only e2e --e2e 1x100 -n 20000` runs it:
 * 20,000 jobs of 16 bytes pre-filled with EnqueueBatch (1000 per call) on a queue that keeps no
 * completed jobs, then one Worker with concurrency 100 and a no-op handler. Prints
 * `node e2e 1x100: N jobs/s`, N = jobs / (first lease to last ack).
 *
 * Usage: node build-test/bench/e2e.js [--server HOST:PORT] [-n 20000] [--concurrency 100]
 * Without --server it starts `$JOBWIRE_BIN serve` (embedded Redis) on free ports.
 */
import { randomBytes } from "node:crypto";
import { parseArgs } from "node:util";
import { Client, silentLogger, Worker } from "@jobwire/client";
import { startJobwire, type JobwireServer } from "@jobwire/client/testing";

const { values: a } = parseArgs({
  options: {
    server: { type: "string" },
    n: { type: "string", short: "n", default: "20000" },
    concurrency: { type: "string", default: "100" },
  },
});
const n = Number(a.n);
const concurrency = Number(a.concurrency);
let server: JobwireServer | undefined;
if (a.server === undefined) server = await startJobwire();
const client = new Client(a.server ?? server?.target ?? "", { logger: silentLogger });
try {
  const queue = `bench-e2e-${randomBytes(4).toString("hex")}`;
  await client.queues.updateConfig(queue, { retention: { keepCompleted: 0 } }, ["retention"]);
  const payload = Buffer.alloc(16, 7);
  for (let done = 0; done < n; done += 1000) {
    const items = Array.from({ length: Math.min(1000, n - done) }, () => ({ queue, name: "noop", payload }));
    const res = await client.enqueueBatch(items);
    const bad = res.find((r) => !r.ok);
    if (bad && !bad.ok) throw new Error(`enqueue refused: ${bad.message}`);
  }
  let first = 0;
  const worker = new Worker(client, { queues: [queue], concurrency, handleSignals: false, logger: silentLogger }).handle("noop", () => {
    if (first === 0) first = performance.now();
  });
  const running = worker.run();
  const last = await new Promise<number>((resolve) => {
    const poll = setInterval(() => {
      if (worker.stats().settled >= n) {
        clearInterval(poll);
        resolve(performance.now());
      }
    }, 2);
  });
  await worker.close();
  await running;
  const secs = (last - first) / 1000;
  console.log(`node e2e 1x${concurrency}: ${Math.round(n / secs)} jobs/s`);
  console.error(`(${n} jobs in ${secs.toFixed(2)} s, first lease to last ack; ${worker.stats().dropped} refused)`);
} finally {
  client.close();
  await server?.stop();
}
