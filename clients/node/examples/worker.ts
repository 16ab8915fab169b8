// The README's worker: 10 handlers at once; SIGTERM / SIGINT drains it, then it returns.
import { Client, NonRetryable, Worker } from "@jobwire/client";

const client = new Client(process.env.JOBWIRE_ADDR ?? "127.0.0.1:50051");
const worker = new Worker(client, { queues: ["emails"], concurrency: 10 });
worker.handle<{ to: string }>("send-welcome-email", async (job, ctx) => {
  if (!job.payload.to.includes("@")) throw new NonRetryable(`bad address ${job.payload.to}`);
  await sendEmail(job.payload.to, { idempotencyKey: ctx.idempotencyKey, signal: ctx.signal });
});
await worker.run(); // until SIGTERM / SIGINT (then it drains) or worker.close()
client.close();

// A stand-in for your email provider's client.
async function sendEmail(to: string, o: { idempotencyKey: string; signal: AbortSignal }): Promise<void> {
  await new Promise((r) => setTimeout(r, 10));
  console.log(`sent to ${to} (key ${o.idempotencyKey}, aborted: ${o.signal.aborted})`);
}
