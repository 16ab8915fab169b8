// Side by side of the fixed-rate and drain scenarios (scripts/bench-vs-bullmq.sh):
//   node extra-report.mjs BULLMQ.json JOBWIRE.json
// Both files in the BullMQ harness's shape ({ scenarios: [{ name, runs: [{ value, ... }] }] }),
// the BullMQ one from scripts/bullmq-extra.mjs, the jobwire one from `jobwire bench --only
// rate,drain --json`. Lower is better for latencies and CPU, higher for jobs/s.
import { readFileSync } from 'node:fs';

const load = (f) => JSON.parse(readFileSync(f, 'utf8')).scenarios;
const [base, other] = process.argv.slice(2).map(load);
const med = (runs, k) => {
  const s = runs.map((r) => r[k]).filter(Number.isFinite).sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};
const us = (runs, k) => med(runs.map((r) => ({ x: (r[k] * 1e4) / r.value })), 'x');
const fmt = (x) => (!Number.isFinite(x) ? '–' : Math.abs(x) >= 100 ? Math.round(x).toLocaleString('en-US') : x.toFixed(2));
console.log('| scenario | figure | BullMQ | jobwire | jobwire/BullMQ |');
console.log('|---|---|---:|---:|---:|');
for (const b of base) {
  const o = other.find((s) => s.name === b.name);
  if (!o) continue;
  const rows = b.name.startsWith('fixed rate')
    ? [['enqueue->lease p50 ms', 'leaseP50'], ['enqueue->lease p99 ms', 'leaseP99'],
      ['enqueue->ack p50 ms', 'ackP50'], ['enqueue->ack p95 ms', 'ackP95'], ['enqueue->ack p99 ms', 'ackP99'],
      ['Redis CPU µs/job', (r) => us(r, 'redisCpu')], ['Node / jobwire server CPU µs/job', (r) => us(r, 'nodeCpu')]]
    : [['jobs/s drained', 'value'], ['fill jobs/s', 'fillRate'], ['Redis MB before the fill', 'memBeforeMB'],
      ['Redis MB full', 'memFullMB'], ['Redis MB after the drain', 'memAfterMB'],
      ['Redis CPU µs/job (drain)', (r) => us(r, 'redisCpu')], ['Node / jobwire server CPU µs/job (drain)', (r) => us(r, 'nodeCpu')]];
  for (const [label, k] of rows) {
    const get = (runs) => (typeof k === 'function' ? k(runs) : med(runs, k));
    const x = get(b.runs);
    const y = get(o.runs);
    console.log(`| ${b.name} | ${label} | ${fmt(x)} | ${fmt(y)} | ${(y / x).toFixed(2)}x |`);
  }
}
