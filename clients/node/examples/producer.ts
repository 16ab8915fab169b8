// The README's producer: enqueue a welcome email (idempotent by job id).
import { Client } from "@jobwire/client";

const client = new Client(process.env.JOBWIRE_TARGET ?? "127.0.0.1:50051");
const { job, created } = await client.enqueue("emails", "send-welcome", { to: "ada@example.com" }, {
  jobId: "welcome:ada", // a duplicate enqueue returns the stored job with created = false
  maxAttempts: 3,
  backoff: { kind: "exponential", delayMs: 1_000, jitter: 1 },
});
console.log(`enqueued ${job.jobId} (created: ${created})`);
client.close();
