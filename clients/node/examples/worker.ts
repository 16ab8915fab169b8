// The README's worker: 10 handlers at once; SIGTERM / SIGINT drains it, then it returns.
import { Client, NonRetryable, Worker } from "@jobwire/client";

const client = new Client(process.env.JOBWIRE_TARGET ?? "127.0.0.1:50051");
const worker = new Worker(client, { queues: ["emails"], concurrency: 10 });
worker.handle<{ to: string }>("send-welcome", (job, ctx) => {
  if (!job.payload.to.includes("@")) throw new NonRetryable(`bad address ${job.payload.to}`);
  // Call your email provider here; pass it ctx.idempotencyKey and ctx.signal.
  console.log(`sending to ${job.payload.to} (key ${ctx.idempotencyKey}, attempt ${ctx.attempt})`);
});
await worker.run(); // until SIGTERM / SIGINT (then it drains) or worker.close()
client.close();
