/**
 * TLS, mTLS and bearer tokens against a real jobwire with --tls-cert/--tls-key, --tls-client-ca
 * and --auth-file (throwaway certificates from scripts/dev-certs.sh, a token from
 * `jobwire token new`): a producer and a worker get through; a call without the token, or a
 * handshake without the client certificate, is refused.
 */
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { after, before, describe, it } from "node:test";
import { Client, pb, status, Worker, type ClientOptions } from "../src/index.js";
import { startJobwire, type JobwireServer } from "../src/testing/index.js";
import { eventually, testLogger, uniqueQueue } from "./helpers.js";

const run = promisify(execFile);
const repo = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..", "..");

async function newToken(id: string): Promise<{ token: string; sha: string }> {
  const { stdout } = await run(process.env.JOBWIRE_BIN ?? "jobwire", ["token", "new", "--id", id]);
  const token = stdout.split("\n")[0]?.trim() ?? "";
  const sha = /sha256: "([0-9a-f]{64})"/.exec(stdout)?.[1];
  assert.ok(token.startsWith("jw_") && sha, `unexpected output of jobwire token new:\n${stdout}`);
  return { token, sha };
}

/**
 * An auth file granting `token` every role on every queue, and `producerOnly` the producer
 * role alone (so a worker with it is refused as PERMISSION_DENIED).
 */
async function authFile(dir: string): Promise<{ token: string; producerOnly: string; path: string }> {
  const all = await newToken("node-sdk");
  const producer = await newToken("node-producer");
  const path = join(dir, "auth.yaml");
  writeFileSync(
    path,
    `principals:\n  - name: node-sdk\n    tokens:\n      - id: node-sdk\n        sha256: ${all.sha}\n` +
      `    grants:\n      - queues: ["*"]\n        roles: [producer, worker, admin]\n` +
      `  - name: node-producer\n    tokens:\n      - id: node-producer\n        sha256: ${producer.sha}\n` +
      `    grants:\n      - queues: ["*"]\n        roles: [producer]\n`,
    { mode: 0o600 },
  );
  return { token: all.token, producerOnly: producer.token, path };
}

async function roundTrip(client: Client): Promise<void> {
  const queue = uniqueQueue("secure");
  const worker = new Worker(client, { queues: [queue], handleSignals: false, logger: testLogger }).handle("job", () => undefined);
  const done = worker.run();
  await client.enqueue(queue, "job", "x", { jobId: "s-1" });
  await eventually("s-1 completed", async () =>
    (await client.getJob(queue, "s-1")).state === pb.JobState.JOB_STATE_COMPLETED ? true : undefined,
  );
  await worker.close();
  await done;
}

describe("TLS, mTLS and tokens", () => {
  let dir: string;
  let certs: string;
  let token: string;
  let producerOnly: string;
  let auth: string;
  before(async () => {
    dir = mkdtempSync(join(tmpdir(), "jobwire-node-secure-"));
    certs = join(dir, "certs");
    await run("bash", [join(repo, "scripts", "dev-certs.sh"), certs]);
    ({ token, producerOnly, path: auth } = await authFile(dir));
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  it("works over TLS with a token; refuses a call without it", async () => {
    const ca = join(certs, "ca.crt");
    const server: JobwireServer = await startJobwire({
      args: ["--tls-cert", join(certs, "server.crt"), "--tls-key", join(certs, "server.key"), "--auth-file", auth],
      probeTls: { ca },
    });
    // The dev certificate names 127.0.0.1, the address dialled.
    const tls: ClientOptions["tls"] = { ca };
    const client = new Client(server.target, { tls, token, logger: testLogger });
    const anonymous = new Client(server.target, { tls, logger: testLogger });
    try {
      await roundTrip(client);
      await assert.rejects(anonymous.getJob("q", "j"), (e: { code: status }) => e.code === status.UNAUTHENTICATED);
      // The sign-up demo over TLS with the token, through its command-line flags.
      const tokenFile = join(dir, "node-sdk.token");
      writeFileSync(tokenFile, `${token}\n`, { mode: 0o600 });
      const demo = join(repo, "clients", "node", "build-test", "examples", "signup-demo.js");
      const { stdout } = await run(process.execPath, [demo, "--server", server.target, "--ca", ca, "--token-file", tokenFile]);
      assert.match(stdout, /all three rows match the experiment/);
    } finally {
      client.close();
      anonymous.close();
      await server.stop();
    }
  });

  it("works over mTLS with a client certificate; no certificate, no handshake", async () => {
    const ca = join(certs, "ca.crt");
    const mtls = { ca, cert: join(certs, "client.crt"), key: join(certs, "client.key") };
    const server = await startJobwire({
      args: [
        "--tls-cert", join(certs, "server.crt"), "--tls-key", join(certs, "server.key"),
        "--tls-client-ca", ca, "--auth-file", auth,
      ],
      probeTls: mtls,
    });
    const client = new Client(server.target, { tls: mtls, token, logger: testLogger });
    const noCert = new Client(server.target, { tls: { ca }, token, logger: testLogger, retry: { attempts: 1 } });
    try {
      await roundTrip(client);
      await assert.rejects(noCert.getJob("q", "j"), (e: { code: status }) => e.code === status.UNAVAILABLE);
    } finally {
      client.close();
      noCert.close();
      await server.stop();
    }
  });

  it("sends a token in clear text to a loopback server", async () => {
    const server = await startJobwire({ args: ["--auth-file", auth] });
    const client = new Client(server.target, { token, logger: testLogger });
    const anonymous = new Client(server.target, { logger: testLogger });
    try {
      await roundTrip(client);
      await assert.rejects(anonymous.enqueue("q", "n", "x"), (e: { code: status }) => e.code === status.UNAUTHENTICATED);
    } finally {
      client.close();
      anonymous.close();
      await server.stop();
    }
  });

  it("ends worker.run() with the refusal when the stream's open is UNAUTHENTICATED or PERMISSION_DENIED (no reconnect loop)", async () => {
    const server = await startJobwire({ args: ["--auth-file", auth] });
    const anonymous = new Client(server.target, { logger: testLogger });
    const producer = new Client(server.target, { token: producerOnly, logger: testLogger });
    try {
      for (const [client, code] of [
        [anonymous, status.UNAUTHENTICATED],
        [producer, status.PERMISSION_DENIED],
      ] as const) {
        const worker = new Worker(client, { queues: [uniqueQueue("refused")], handleSignals: false, logger: testLogger });
        worker.handle("job", () => undefined);
        // Far below the first reconnect's backoff cap: a retry loop would never settle run().
        const outcome = await Promise.race([
          worker.run().then(
            () => "resolved",
            (e: { code?: status }) => e.code,
          ),
          new Promise((r) => setTimeout(() => r("still running"), 20_000).unref()),
        ]);
        if (outcome === "still running") await worker.close();
        assert.equal(outcome, code);
      }
    } finally {
      anonymous.close();
      producer.close();
      await server.stop();
    }
  });
});
