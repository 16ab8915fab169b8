/**
 * The package as users get it: `npm pack`, installed into a scratch project, imported by name
 * (ESM, both entry points), and the README's producer and worker (examples/producer.ts and
 * examples/worker.ts, compiled) run from that project against a real jobwire.
 */
import assert from "node:assert/strict";
import { execFile, spawn } from "node:child_process";
import { copyFileSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { after, before, describe, it } from "node:test";
import { Client, pb } from "../src/index.js";
import { startJobwire, type JobwireServer } from "../src/testing/index.js";
import { eventually } from "./helpers.js";

const run = promisify(execFile);
const here = dirname(fileURLToPath(import.meta.url));
const pkgDir = join(here, "..", "..");

describe("npm pack", () => {
  let server: JobwireServer;
  let dir: string;
  before(async () => {
    server = await startJobwire();
    dir = mkdtempSync(join(tmpdir(), "jobwire-pack-"));
  });
  after(async () => {
    await server?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it("installs from the tarball, and the README's producer and worker run from it", { timeout: 180_000 }, async () => {
    const { stdout } = await run("npm", ["pack", "--json", "--pack-destination", dir], { cwd: pkgDir }); // prepare builds dist/
    const [info] = JSON.parse(stdout) as { filename: string; files: { path: string }[] }[];
    assert.ok(info);
    const files = info.files.map((f) => f.path);
    assert.ok(files.includes("dist/index.js") && files.includes("dist/index.d.ts"), "dist/ is in the package");
    assert.ok(files.includes("dist/testing/index.js"));
    assert.ok(!files.some((f) => f.startsWith("test/") || f.startsWith("build-test/") || f.startsWith("node_modules/")));
    writeFileSync(join(dir, "package.json"), JSON.stringify({ name: "scratch", private: true, type: "module" }));
    await run("npm", ["install", "--no-audit", "--no-fund", "--prefer-offline", "--loglevel=error", join(dir, info.filename)], { cwd: dir });
    const installed = JSON.parse(readFileSync(join(dir, "node_modules", "@jobwire", "client", "package.json"), "utf8")) as { type: string };
    assert.equal(installed.type, "module");
    // Both entry points import by name.
    writeFileSync(
      join(dir, "check.mjs"),
      'import { Client, Worker, NonRetryable } from "@jobwire/client";\n' +
        'import { runHandler } from "@jobwire/client/testing";\n' +
        'console.log(typeof Client, typeof Worker, typeof NonRetryable, (await runHandler(() => {})).outcome);\n',
    );
    assert.equal((await run(process.execPath, ["check.mjs"], { cwd: dir })).stdout.trim(), "function function function ack");
    // The README's snippets, compiled, run from the scratch project.
    for (const f of ["producer.js", "worker.js"]) copyFileSync(join(pkgDir, "build-test", "examples", f), join(dir, f));
    const env = { ...process.env, JOBWIRE_TARGET: server.target, JOBWIRE_LOG_LEVEL: "warn" };
    const produced = await run(process.execPath, ["producer.js"], { cwd: dir, env });
    assert.match(produced.stdout, /enqueued welcome:ada \(created: true\)/);
    const worker = spawn(process.execPath, ["worker.js"], { cwd: dir, env, stdio: ["ignore", "pipe", "inherit"] });
    let out = "";
    worker.stdout.on("data", (d: Buffer) => (out += d.toString()));
    const exited = new Promise<number | null>((resolve) => worker.on("exit", resolve));
    const client = new Client(server.target);
    try {
      await eventually("welcome:ada completed", async () =>
        (await client.getJob("emails", "welcome:ada")).state === pb.JobState.JOB_STATE_COMPLETED ? true : undefined,
      );
      worker.kill("SIGTERM");
      assert.equal(await exited, 0);
      assert.match(out, /sending to ada@example.com \(key .+, attempt 1\)/);
    } finally {
      client.close();
      if (worker.exitCode === null) worker.kill("SIGKILL");
    }
  });
});
