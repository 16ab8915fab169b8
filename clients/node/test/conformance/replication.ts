/**
 * The replication scenario (issue 32): an Enqueue without a jobId that fails NOT_REPLICATED is
 * retried with the id the error names, and the job exists once.
 */
import assert from "node:assert/strict";
import * as grpc from "@grpc/grpc-js";
import { notReplicatedJobId } from "../../src/index.js";
import { uniqueQueue } from "../helpers.js";
import { withServer, type ScenarioTest } from "./scenario.js";

/** grpc_server_handled_total of `method` answered `code` in a /metrics text (0 if absent). */
function handled(metrics: string, method: string, code: string): number {
  const want = [`grpc_method="${method}"`, `grpc_code="${code}"`];
  for (const line of metrics.split("\n")) {
    if (line.startsWith("grpc_server_handled_total{") && want.every((w) => line.includes(w))) {
      return Number(line.slice(line.lastIndexOf(" ") + 1));
    }
  }
  return 0;
}

export const replication: Record<string, ScenarioTest> = {
  async unreplicated_enqueue_exists_once(s) {
    await withServer(s, async (server, client) => {
      const queue = uniqueQueue("unreplicated");
      const err = await client.enqueue(queue, "work", {}).then(
        () => assert.fail("NOT_REPLICATED expected: the Redis has no replica"),
        (e: unknown) => e,
      );
      assert.equal((err as grpc.ServiceError).code, grpc.status.UNAVAILABLE, String(err));
      const jobId = notReplicatedJobId(err);
      assert.ok(jobId, `the error names no job id: ${String(err)}`);
      const job = await client.getJob(queue, jobId);
      assert.equal(job.jobId, jobId);
      const stats = await client.queues.stats(queue);
      assert.deepEqual([stats.waiting, stats.delayed, stats.active], [1, 0, 0]);
      const metrics = await (await fetch(`http://127.0.0.1:${server.httpPort}/metrics`)).text();
      assert.ok(handled(metrics, "Enqueue", "Unavailable") > 1, "the SDK retried with the job id");
    });
  },
};
