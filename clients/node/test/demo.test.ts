/** The sign-up demo (examples/signup-demo.ts) against a real jobwire: exit 0 and the table 15/5/30, 15/5/26, 18/2/29. */
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { after, before, describe, it } from "node:test";
import { startJobwire, type JobwireServer } from "../src/testing/index.js";

const here = dirname(fileURLToPath(import.meta.url));

describe("sign-up demo", () => {
  let server: JobwireServer;
  before(async () => (server = await startJobwire()));
  after(async () => server?.stop());

  it("prints the experiment's table and exits 0", async (t) => {
    const demo = join(here, "..", "examples", "signup-demo.js");
    const { stdout } = await promisify(execFile)(process.execPath, [demo, "--server", server.target, "--timeout", "60"]);
    for (const line of stdout.trimEnd().split("\n")) t.diagnostic(line);
    assert.match(stdout, /\| retry everything \| 15 \| 5 \| 30 \|/);
    assert.match(stdout, /\| permanent errors not retried \| 15 \| 5 \| 26 \|/);
    assert.match(stdout, /\| replay after recovery \(not the 400s\) \| 18 \| 2 \| 29 \|/);
  });
});
