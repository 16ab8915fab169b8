/**
 * The shared conformance scenarios (clients/conformance/scenarios.json), each against its own
 * real jobwire. A scenario in the file without a test here fails the suite.
 */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, it } from "node:test";
import { basic } from "./conformance/basic.js";
import { control } from "./conformance/control.js";
import { faults } from "./conformance/faults.js";
import { replication } from "./conformance/replication.js";
import type { Scenario, ScenarioTest } from "./conformance/scenario.js";

const here = dirname(fileURLToPath(import.meta.url));
// build-test/test/ -> the repository's clients/conformance/scenarios.json
const file = process.env.JOBWIRE_SCENARIOS ?? join(here, "..", "..", "..", "conformance", "scenarios.json");
const scenarios = (JSON.parse(readFileSync(file, "utf8")) as { scenarios: Scenario[] }).scenarios;
const tests: Record<string, ScenarioTest> = { ...basic, ...faults, ...control, ...replication };

describe("conformance (clients/conformance/scenarios.json)", () => {
  it("has a test for every scenario in the file", () => {
    const missing = scenarios.map((s) => s.id).filter((id) => !(id in tests));
    assert.deepEqual(missing, [], `scenarios without a test in the TypeScript SDK: ${missing.join(", ")}`);
    assert.ok(scenarios.length >= 8);
  });
  for (const s of scenarios) {
    const t = tests[s.id];
    it(s.id, { timeout: 120_000 }, async () => {
      assert.ok(t, `no test for scenario ${s.id}`);
      await t(s);
    });
  }
});
