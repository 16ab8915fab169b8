/**
 * The README's producer and worker snippets are the programs under examples/ (which
 * test/pack.test.ts runs from the packed tarball): each snippet must be its whole file, after
 * the file's leading comment, so the README cannot drift from tested code and a pasted snippet
 * has nothing undefined.
 */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, it } from "node:test";

const root = join(dirname(fileURLToPath(import.meta.url)), "..", "..");

function snippet(readme: string, heading: string): string[] {
  const at = readme.indexOf(`## ${heading}`);
  assert.ok(at >= 0, `README has no "## ${heading}" section`);
  const block = /```ts\n([\s\S]*?)```/.exec(readme.slice(at));
  assert.ok(block?.[1], `no ts block under "## ${heading}"`);
  return block[1].trimEnd().split("\n");
}

describe("README", () => {
  const readme = readFileSync(join(root, "README.md"), "utf8");
  for (const [heading, file] of [
    ["Produce (examples/producer.ts)", "producer.ts"],
    ["Work (examples/worker.ts)", "worker.ts"],
    ["Job control (examples/job-control.ts)", "job-control.ts"],
  ] as const) {
    it(`"${heading}" is examples/${file}`, () => {
      const lines = readFileSync(join(root, "examples", file), "utf8").split("\n");
      while (lines[0]?.startsWith("//")) lines.shift();
      const block = snippet(readme, heading);
      assert.ok(block.length >= 8, "the snippet is too short to be the program");
      assert.deepEqual(block, lines.join("\n").trimEnd().split("\n"));
    });
  }
});
