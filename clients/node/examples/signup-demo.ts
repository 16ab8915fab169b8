/**
 * The 20-sign-up dead-letter experiment on the TypeScript SDK (the reference is
 * examples/python/signup_demo.py; the numbers must match it).
 *
 * Twenty sign-ups each enqueue a "send-welcome-email" job. A fake provider rejects user_4 and
 * user_9 for good (400: a comma in the address) and is down (503) for user_12..14 until it
 * recovers. Jobs allow 3 attempts, exponential backoff from 50 ms with jitter. Three runs:
 *   (a) retry everything: every provider error fails the attempt with RETRY;
 *   (b) permanent errors not retried: a 400 throws NonRetryable, a 503 a plain error;
 *   (c) replay after recovery (not the 400s): the provider recovers, dead jobs whose last
 *       error was provider_unavailable are replayed with a filter; the 400s stay dead.
 * The provider dedupes sends by the lease's idempotency key. Prints the table and exits 1
 * when a number differs (15/5/30, 15/5/26, 18/2/29), 2 when the run itself failed.
 *
 * Usage: node signup-demo.js [--server HOST:PORT] [--ca ca.crt [--cert c.crt --key c.key]]
 *        [--server-name NAME] [--token-file FILE] [--timeout SECONDS] [--concurrency N]
 */
import { randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { Client, NonRetryable, pb, silentLogger, Worker, type ClientOptions } from "@jobwire/client";

const SIGNUPS = 20;
const BAD_ADDRESSES = new Set(["user_4", "user_9"]);
const OUTAGE = new Set(["user_12", "user_13", "user_14"]);
const JOB_NAME = "send-welcome-email";
const WORKERS = 2;
const RETRY_ALL = "retry everything";
const CLASSIFIED = "permanent errors not retried";
const REPLAYED = "replay after recovery (not the 400s)";
const EXPECTED: Record<string, [number, number, number]> = {
  [RETRY_ALL]: [15, 5, 30],
  [CLASSIFIED]: [15, 5, 26],
  [REPLAYED]: [18, 2, 29],
};
const EMAIL_RE = /^[^@\s]+@[^@\s]+\.[^@\s]+$/;

/** A provider error with the type recorded on the attempt. */
class ProviderError extends Error {
  constructor(
    message: string,
    readonly errorType: string,
  ) {
    super(message);
  }
}

/** Counts every request; rejects bad addresses; is down for some users until recover(). */
class FakeProvider {
  calls = 0;
  duplicates = 0;
  private down = new Set(OUTAGE);
  private readonly sent = new Map<string, string>();
  send(user: string, email: string, key: string): void {
    this.calls++;
    if (!EMAIL_RE.test(email)) throw new ProviderError(`400 invalid address: ${email}`, "invalid_address");
    if (this.down.has(user)) throw new ProviderError("503 service unavailable", "provider_unavailable");
    if (this.sent.has(key)) this.duplicates++;
    else this.sent.set(key, user);
  }
  recover(): void {
    this.down.clear();
  }
  get emailed(): number {
    return this.sent.size;
  }
}

/** What one queue and its provider went through ((b) and (c) share one). */
interface Run {
  queue: string;
  provider: FakeProvider;
  jobIds: Map<string, string>;
  keys: Map<string, Set<string>>;
  problems: string[];
}

class DemoError extends Error {}

function newRun(slug: string): Run {
  return {
    queue: `signups-${slug}-${randomBytes(4).toString("hex")}`,
    provider: new FakeProvider(),
    jobIds: new Map(),
    keys: new Map(),
    problems: [],
  };
}

async function enqueueSignups(client: Client, run: Run): Promise<void> {
  for (let i = 1; i <= SIGNUPS; i++) {
    const user = `user_${i}`;
    const email = BAD_ADDRESSES.has(user) ? `${user}@example,com` : `${user}@example.com`;
    const jobId = `welcome-email:${user}`;
    const { created } = await client.enqueue(run.queue, JOB_NAME, { user_id: user, email }, {
      jobId,
      metadata: { demo: "signup" },
      maxAttempts: 3,
      backoff: { kind: "exponential", delayMs: 50, jitter: 0.5, maxDelayMs: 1000 },
    });
    if (!created) throw new DemoError(`Enqueue of ${jobId} on fresh queue ${run.queue} said created=false`);
    run.jobIds.set(jobId, user);
  }
}

async function workUntilSettled(client: Client, run: Run, classify: boolean, concurrency: number, timeoutS: number, label: string): Promise<Map<string, pb.Job>> {
  const workers = Array.from({ length: WORKERS }, (_, i) =>
    new Worker(client, {
      queues: [run.queue],
      concurrency,
      workerId: `signup-demo-${label}-${i + 1}`,
      handleSignals: false,
    }).handle<{ user_id: string; email: string }>(JOB_NAME, (job, ctx) => {
      const keys = run.keys.get(job.id) ?? new Set<string>();
      keys.add(ctx.idempotencyKey);
      run.keys.set(job.id, keys);
      if (ctx.idempotencyKey === "") run.problems.push(`lease of ${job.id} attempt ${ctx.attempt} has no idempotency_key`);
      try {
        run.provider.send(job.payload.user_id, job.payload.email, ctx.idempotencyKey || job.id);
      } catch (e) {
        if (classify && e instanceof ProviderError && e.errorType === "invalid_address") {
          throw new NonRetryable(e.message, { errorType: e.errorType, cause: e });
        }
        throw e;
      }
    }),
  );
  const running = workers.map((w) => w.run());
  try {
    const deadline = Date.now() + timeoutS * 1000;
    const final = new Set([pb.JobState.JOB_STATE_COMPLETED, pb.JobState.JOB_STATE_DEAD]);
    for (;;) {
      const current = new Map<string, pb.Job>();
      for (const id of run.jobIds.keys()) current.set(id, await client.getJob(run.queue, id));
      if ([...current.values()].every((j) => final.has(j.state))) return current;
      if (Date.now() > deadline) {
        const pending = [...current.values()].filter((j) => !final.has(j.state)).map((j) => `${j.jobId} ${pb.JobState[j.state]}`);
        throw new DemoError(`jobs on ${run.queue} not settled after ${timeoutS} s: ${pending.join(", ")}`);
      }
      await new Promise((r) => setTimeout(r, 100));
    }
  } finally {
    await Promise.all(workers.map((w) => w.close()));
    await Promise.all(running);
    for (const w of workers) {
      if (w.stats().dropped > 0) run.problems.push(`${w.workerId}: ${w.stats().dropped} results were refused`);
    }
  }
}

async function listDead(client: Client, queue: string): Promise<pb.Job[]> {
  const out: pb.Job[] = [];
  for await (const j of client.deadLetters.all(queue)) out.push(j);
  return out;
}

async function row(client: Client, run: Run, final: Map<string, pb.Job>, strategy: string): Promise<[string, number, number, number]> {
  const dead = await listDead(client, run.queue);
  const deadByState = [...final.values()].filter((j) => j.state === pb.JobState.JOB_STATE_DEAD).map((j) => j.jobId).sort();
  const listed = dead.map((j) => j.jobId).sort();
  if (JSON.stringify(listed) !== JSON.stringify(deadByState)) {
    run.problems.push(`${strategy}: ListDeadLetters has ${listed.join(",")}, GetJob says DEAD for ${deadByState.join(",")}`);
  }
  const kinds = new Map<string, number>();
  for (const j of dead) {
    const k = j.errors[j.errors.length - 1]?.errorType ?? "?";
    kinds.set(k, (kinds.get(k) ?? 0) + 1);
  }
  const byKind = [...kinds].sort().map(([k, n]) => `${k} ${n}`).join(", ") || "none";
  console.log(`dead letters [${strategy}] queue ${run.queue}: ${dead.length} (${byKind})`);
  return [strategy, run.provider.emailed, dead.length, run.provider.calls];
}

function checkKeys(run: Run, label: string): void {
  for (const [id, keys] of [...run.keys].sort()) {
    if (keys.size !== 1) run.problems.push(`${label}: idempotency key of ${id} changed across attempts: ${[...keys].join(", ")}`);
  }
}

async function main(): Promise<number> {
  const { values: a } = parseArgs({
    options: {
      server: { type: "string", default: "127.0.0.1:50051" },
      timeout: { type: "string", default: "60" },
      concurrency: { type: "string", default: "4" },
      ca: { type: "string" },
      cert: { type: "string" },
      key: { type: "string" },
      "server-name": { type: "string" },
      "token-file": { type: "string" },
    },
  });
  const opts: ClientOptions = { logger: silentLogger };
  if (a.ca) opts.tls = { ca: a.ca, ...(a.cert ? { cert: a.cert } : {}), ...(a.key ? { key: a.key } : {}), ...(a["server-name"] ? { serverName: a["server-name"] } : {}) };
  if (a["token-file"]) opts.token = readFileSync(a["token-file"], "utf8").trim();
  const client = new Client(a.server, opts);
  const timeout = Number(a.timeout);
  const concurrency = Number(a.concurrency);
  const rows: [string, number, number, number][] = [];
  const problems: string[] = [];
  try {
    await client.waitForReady(10_000).catch(() => {
      throw new DemoError(`cannot connect to jobwire at ${a.server} within 10 s`);
    });
    // (a) retry everything
    const ra = newRun("retry-all");
    await enqueueSignups(client, ra);
    rows.push(await row(client, ra, await workUntilSettled(client, ra, false, concurrency, timeout, "a"), RETRY_ALL));
    checkKeys(ra, "a");
    problems.push(...ra.problems);
    // (b) permanent errors not retried
    const rb = newRun("classified");
    await enqueueSignups(client, rb);
    let final = await workUntilSettled(client, rb, true, concurrency, timeout, "b");
    rows.push(await row(client, rb, final, CLASSIFIED));
    for (const j of await listDead(client, rb.queue)) {
      const want = BAD_ADDRESSES.has(rb.jobIds.get(j.jobId) ?? "") ? pb.DeadReason.DEAD_REASON_NO_RETRY : pb.DeadReason.DEAD_REASON_ATTEMPTS_EXHAUSTED;
      if (j.deadReason !== want) rb.problems.push(`${CLASSIFIED}: ${j.jobId} dead with ${pb.DeadReason[j.deadReason]}, expected ${pb.DeadReason[want]}`);
    }
    // (c) replay after recovery, not the 400s: same queue and provider as (b)
    rb.provider.recover();
    const replayed = await client.deadLetters.replay(rb.queue, {
      filter: { reason: pb.DeadReason.DEAD_REASON_ATTEMPTS_EXHAUSTED, errorType: "provider_unavailable" },
    });
    const wantReplayed = [...rb.jobIds].filter(([, u]) => OUTAGE.has(u)).map(([id]) => id).sort();
    console.log(`replay [${REPLAYED}] reason=ATTEMPTS_EXHAUSTED error_type=provider_unavailable: ${[...replayed.replayedJobIds].sort().join(", ")}`);
    if (JSON.stringify([...replayed.replayedJobIds].sort()) !== JSON.stringify(wantReplayed)) {
      rb.problems.push(`${REPLAYED}: replayed ${replayed.replayedJobIds.join(",")}, expected ${wantReplayed.join(",")}`);
    }
    final = await workUntilSettled(client, rb, true, concurrency, timeout, "c");
    rows.push(await row(client, rb, final, REPLAYED));
    checkKeys(rb, "b+c");
    for (const id of wantReplayed) {
      if (final.get(id)?.replays !== 1) rb.problems.push(`${REPLAYED}: ${id} has replays=${final.get(id)?.replays}, expected 1`);
    }
    problems.push(...rb.problems);
  } catch (e) {
    const err = e as Error & { code?: number; details?: string };
    console.error(e instanceof DemoError ? `error: ${err.message}` : `error: RPC failed: ${err.code ?? ""} ${err.details ?? err.message}`);
    return 2;
  } finally {
    client.close();
  }
  console.log("\n| strategy | emailed | dead-lettered | provider requests |\n|---|---|---|---|");
  for (const [s, emailed, dead, calls] of rows) console.log(`| ${s} | ${emailed} | ${dead} | ${calls} |`);
  console.log();
  for (const [s, ...got] of rows) {
    const want = EXPECTED[s] ?? [0, 0, 0];
    if (got.join("/") !== want.join("/")) problems.push(`${s}: got ${got.join("/")}, expected ${want.join("/")} (emailed/dead-lettered/provider requests)`);
  }
  if (problems.length > 0) {
    for (const p of problems) console.error(`MISMATCH ${p}`);
    return 1;
  }
  console.log("all three rows match the experiment (15/5/30, 15/5/26, 18/2/29)");
  return 0;
}

process.exitCode = await main();
