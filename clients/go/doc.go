// Package jobwire is the Go client of jobwire, a job-orchestration server: a producer
// [Client] (Enqueue, EnqueueBatch, GetJob, CancelJob, CancelJobs, DeleteJob, dead-letter,
// queue and group administration) and a [Worker] that leases jobs over the
// WorkerService.Subscribe stream and runs typed handlers registered with [Handle].
//
// The worker speaks the stream protocol of proto/jobwire/v1/worker_service.proto:
//
//   - Concurrency = credits (Google Cloud Pub/Sub's flow control): the stream is opened with
//     as many credits as free handler slots, the server returns a credit when a job is
//     settled on the stream, and a credit is granted only when a slot frees. The worker never
//     holds more leases than [WorkerOptions.Concurrency].
//   - Liveness comes from the stream itself: heartbeats while handlers run, a stall watchdog
//     that replaces a stream whose sends or settles stop making progress, and gRPC keepalive.
//   - A broken stream is replaced with full-jitter exponential backoff (0.5 s to 30 s, the
//     "Full Jitter" of AWS's "Exponential Backoff and Jitter"), under the same worker id;
//     every lease still held is renewed with ExtendLease by its lease token, and results are
//     settled with the unary Ack and Fail while no stream holds the lease. A finished result
//     is never dropped silently: it is settled, or its loss is logged (a lost lease:
//     FAILED_PRECONDITION, the job is delivered again).
//   - Job control on the stream: a cancelled job's handler sees its context cancelled with a
//     [*CancelledError] cause (errors.Is [ErrJobCancelled]); [Job.Progress] and
//     [Job.SaveCheckpoint] are sent on the stream and wait for the server's answer; the next
//     attempt gets the last checkpoint in [Job.Checkpoint]; [Job.SetResult] rides on the Ack.
//   - Graceful shutdown on SIGTERM/SIGINT (opt-out) or when Run's context ends: Drain, wait
//     for held jobs up to a grace (default 25 s), then cancel the handlers' contexts and fail
//     what is left with RETRY.
//
// Handlers return errors: [NonRetryable] dead-letters the job at once, [RetryAfter] retries
// it after a delay, [RateLimited] puts it back without using an attempt ([RateLimitedGroup]
// also pauses the job's group), and any other error
// retries it per the job's backoff. Logs go through log/slog.
//
// The generated protobuf and gRPC code is in the gen/jobwire/v1 package (imported as
// jobwirev1); test helpers are in the jobwiretest package.
package jobwire
