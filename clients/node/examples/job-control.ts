// The README's job control: a group and an expiry at enqueue, a cancel, a cancel by filter, a delete.
import { Client, pb } from "@jobwire/client";

const client = new Client(process.env.JOBWIRE_TARGET ?? "127.0.0.1:50051");
await client.enqueue("exports", "export", { rows: 1000 }, { jobId: "export:7", groupKey: "tenant-a" });
await client.enqueue("exports", "digest", {}, { jobId: "digest:7", ttl: 3_600_000 }); // or expireAt: a Date
const { job, cancelled } = await client.cancelJob("exports", "export:7", "customer left");
console.log(`export:7 ${pb.JobState[job.state]} (cancelled: ${cancelled})`);
const count = await client.cancelJobs("exports", { name: "digest" }, { reason: "digest off" });
console.log(`cancelled ${count.cancelled}, signalled ${count.signalled}`);
await client.deleteJob("exports", "export:7"); // not while ACTIVE: cancel it first
client.close();
