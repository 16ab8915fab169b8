// BullMQ's side of the scenarios `jobwire bench --only rate,drain` runs, for
// scripts/bench-vs-bullmq.sh (run from the scratch copy of the BullMQ harness, whose
// node_modules and lib.mjs it uses). Writes JSON in the harness's shape, with the same
// scenario names as jobwire's, and prints a markdown table with the latency notes.
//
//   fixed rate: R jobs/s for S s   queue.add() sent on a fixed schedule (open loop: a call is
//                                  not awaited before the next send), one Worker of
//                                  concurrency C; per job the time from just before add() to
//                                  the processor's start (enqueue->lease) and to the Worker's
//                                  'completed' event (enqueue->ack).
//   drain: N pre-filled jobs       addBulk(1000) until N wait, then a Worker of concurrency C
//                                  (removeOnComplete) drains them; Redis used_memory before
//                                  the fill, full, and after the drain.
//
// Usage: node bullmq-extra.mjs --harness DIR --port P --pidfile F --rates 100,1000,5000
//          --secs 10 --drain N --concurrency 100 --json OUT
import { readFileSync, writeFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { performance } from 'node:perf_hooks';
import { createRequire } from 'node:module';

const arg = (k, d) => {
  const i = process.argv.indexOf(`--${k}`);
  return i > 0 ? process.argv[i + 1] : d;
};
const harness = arg('harness', '.');
const requireHarness = createRequire(`${harness}/package.json`);
const { Queue, Worker } = requireHarness('bullmq');
const { Redis } = requireHarness('ioredis');
const { boxCpuSec, procCpuSec } = await import(`${harness}/lib.mjs`);
const port = +arg('port', 6390);
const pids = readFileSync(arg('pidfile'), 'utf8').split(/\s+/).filter(Boolean);
const rates = arg('rates', '100,1000,5000').split(',').map(Number);
const secs = +arg('secs', 10);
const drainJobs = +arg('drain', 1000000);
const concurrency = +arg('concurrency', 100);
const connection = { host: '127.0.0.1', port };

const snap = () => ({
  t: performance.now() / 1000,
  redis: pids.reduce((s, p) => s + procCpuSec(p), 0),
  node: process.cpuUsage(),
  box: boxCpuSec(),
});
const measure = (a, b, count) => {
  const sec = Math.max(b.t - a.t, 1e-9);
  const redis = (100 * (b.redis - a.redis)) / sec;
  const node = (b.node.user + b.node.system - a.node.user - a.node.system) / 1e4 / sec;
  const box = (100 * (b.box.busy - a.box.busy)) / sec;
  return { value: count / sec, sec, redisCpu: redis, nodeCpu: node, otherCpu: box - redis - node };
};
const pct = (xs, p) => (xs.length ? xs[Math.min(xs.length, Math.max(1, Math.ceil((p / 100) * xs.length))) - 1] : NaN);
const spans = (from, to) => from.map((t, i) => to[i] - t).filter((x) => Number.isFinite(x)).sort((a, b) => a - b);
const admin = new Redis(connection);
const flush = () => admin.flushdb();
const usedMemory = async () => +(await admin.info('memory')).match(/used_memory:(\d+)/)[1];

async function fixedRate(rate) {
  const n = rate * secs;
  const name = `fixed rate ${rate}`;
  const q = new Queue(name, { connection });
  await flush();
  const sent = new Array(n).fill(NaN);
  const leased = new Array(n).fill(NaN);
  const acked = new Array(n).fill(NaN);
  let done = 0;
  let finish;
  const all = new Promise((r) => { finish = r; });
  const w = new Worker(name, async (job) => { leased[+job.data.i] = performance.now(); },
    { connection, concurrency, removeOnComplete: { count: 0 } });
  w.on('completed', (job) => {
    acked[+job.data.i] = performance.now();
    if (++done === n) finish();
  });
  await w.waitUntilReady();
  await sleep(300);
  const a = snap();
  const start = performance.now();
  let late = 0;
  const calls = [];
  for (let i = 0; i < n; i++) {
    const at = start + (i * 1000) / rate;
    const wait = at - performance.now();
    if (wait > 1) await sleep(wait);
    if (performance.now() > at + 5) late++;
    sent[i] = performance.now();
    calls.push(q.add('j', { i }, { removeOnComplete: true }));
  }
  await Promise.all(calls);
  await Promise.race([all, sleep(60000)]);
  const b = snap();
  await w.close();
  await q.close();
  if (done < n) throw new Error(`${name}: only ${done} of ${n} completed`);
  const l = spans(sent, leased);
  const k = spans(sent, acked);
  return { ...measure(a, b, n), leaseP50: pct(l, 50), leaseP95: pct(l, 95), leaseP99: pct(l, 99),
    leaseMax: l[l.length - 1], ackP50: pct(k, 50), ackP95: pct(k, 95), ackP99: pct(k, 99),
    ackMax: k[k.length - 1], lateSends: late, workers: `concurrency ${concurrency}` };
}

async function drain() {
  const q = new Queue('drain', { connection });
  await flush();
  const mem = [await usedMemory()];
  const f0 = performance.now();
  for (let i = 0; i < drainJobs; i += 1000) {
    await q.addBulk(Array.from({ length: Math.min(1000, drainJobs - i) },
      () => ({ name: 'j', data: {}, opts: { removeOnComplete: true } })));
  }
  const fillRate = drainJobs / ((performance.now() - f0) / 1000);
  mem.push(await usedMemory());
  let done = 0;
  let first;
  let finish;
  const all = new Promise((r) => { finish = r; });
  const w = new Worker('drain', async () => { first ??= snap(); },
    { connection, concurrency, removeOnComplete: { count: 0 } });
  w.on('completed', () => { if (++done === drainJobs) finish(); });
  await Promise.race([all, sleep(60000 + drainJobs / 2)]);
  const b = snap();
  await w.close();
  if (done < drainJobs) throw new Error(`drain: only ${done} of ${drainJobs} completed`);
  mem.push(await usedMemory());
  await q.close();
  return { ...measure(first, b, drainJobs), fillRate, memBeforeMB: mem[0] / 1e6,
    memFullMB: mem[1] / 1e6, memAfterMB: mem[2] / 1e6, workers: `concurrency ${concurrency}` };
}

const scenarios = [];
for (const rate of rates) {
  scenarios.push({ name: `fixed rate: ${rate} jobs/s for ${secs} s`, unit: 'jobs/s', runs: [await fixedRate(rate)] });
}
scenarios.push({ name: `drain: ${drainJobs} pre-filled jobs`, unit: 'jobs/s', runs: [await drain()] });
writeFileSync(arg('json'), JSON.stringify({ meta: { system: 'bullmq', label: 'extra' }, scenarios }, null, 2));
process.exit(0);
