// Makes the scratch copy of the BullMQ harness (bench.mjs) run on a Redis Cluster, for
// scripts/bench-vs-bullmq.sh with a redis+cluster:// URL. Not run on its own.
//
//   node scripts/bullmq-on-cluster.mjs <copy of bench.mjs>
//
// The patched harness reads BENCH_CLUSTER_NODES (host:port of every master, comma-separated):
//   - one ioredis Cluster connection, shared by the Queues and Workers (BullMQ duplicates it
//     for its blocking calls) and the admin calls;
//   - every Queue and Worker gets the prefix `{bull}`: BullMQ's keys of one queue must share a
//     slot, so all of them live on the master of the `{bull}` slot (BullMQ does not spread a
//     queue, nor, with one prefix, queues, over masters);
//   - FLUSHDB goes to every master;
//   - the pidfile may hold several pids (one per master): the Redis CPU column is their sum.
// Without BENCH_CLUSTER_NODES the patched harness behaves as the original. Each replacement
// must match exactly once, so a changed harness fails loudly here instead of running half
// patched.
import { readFileSync, writeFileSync } from 'node:fs';

const file = process.argv[2];
if (!file) {
  console.error('usage: node bullmq-on-cluster.mjs <bench.mjs>');
  process.exit(2);
}
let src = readFileSync(file, 'utf8');

const replace = (from, to) => {
  const at = src.split(from).length - 1;
  if (at !== 1) {
    console.error(`bullmq-on-cluster: expected one ${JSON.stringify(from)} in ${file}, found ${at}`);
    process.exit(1);
  }
  src = src.replace(from, to);
};
const replaceAll = (from, to, min) => {
  const at = src.split(from).length - 1;
  if (at < min) {
    console.error(`bullmq-on-cluster: expected ${min}+ ${JSON.stringify(from)} in ${file}, found ${at}`);
    process.exit(1);
  }
  src = src.split(from).join(to);
};

replace(
  "import { Queue, Worker } from 'bullmq';\nimport { Redis } from 'ioredis';",
  `import { Queue as BullQueue, Worker as BullWorker } from 'bullmq';
import { Redis, Cluster } from 'ioredis';
const CLUSTER = (process.env.BENCH_CLUSTER_NODES || '').split(',').filter(Boolean)
  .map((a) => ({ host: a.slice(0, a.lastIndexOf(':')), port: +a.slice(a.lastIndexOf(':') + 1) }));
const ON_CLUSTER = CLUSTER.length > 0;
const PREFIX = ON_CLUSTER ? { prefix: '{bull}' } : {};
class Queue extends BullQueue { constructor(name, opts = {}) { super(name, { ...PREFIX, ...opts }); } }
class Worker extends BullWorker { constructor(name, fn, opts = {}) { super(name, fn, { ...PREFIX, ...opts }); } }`,
);
replace(
  'const connection = { host: ',
  'const connection = ON_CLUSTER\n  ? new Cluster(CLUSTER, { redisOptions: { maxRetriesPerRequest: null } })\n  : { host: ',
);
replace(
  "try { redisPid = readFileSync(PIDFILE, 'utf8').trim(); }",
  "try { redisPid = readFileSync(PIDFILE, 'utf8').trim().split(/\\s+/).filter(Boolean); }",
);
replace(
  'const redisCpuSec = () => (redisPid ? procCpuSec(redisPid) : NaN);',
  'const redisCpuSec = () => (redisPid?.length ? redisPid.reduce((s, p) => s + procCpuSec(p), 0) : NaN);',
);
replace(
  'const admin = new Redis(connection);',
  'const admin = ON_CLUSTER ? new Cluster(CLUSTER) : new Redis(connection);\n' +
    'const flushAll = async () => {\n' +
    '  if (!ON_CLUSTER) return admin.flushdb();\n' +
    "  if (admin.status !== 'ready') await new Promise((ok) => admin.once('ready', ok)); // nodes() is empty before\n" +
    "  await Promise.all(admin.nodes('master').map((n) => n.flushdb()));\n" +
    '};',
);
replaceAll('await admin.flushdb();', 'await flushAll();', 2);
replace('await admin.quit();', "await admin.quit();\nif (ON_CLUSTER) await connection.quit();");

writeFileSync(file, src);
