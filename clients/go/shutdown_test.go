package jobwire_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/jobwire/jobwire/clients/go"
	pb "github.com/jobwire/jobwire/clients/go/gen/jobwire/v1"
	"github.com/jobwire/jobwire/clients/go/jobwiretest"
)

// TestShutdownGraceCancelsAndFailsWithRetry: a handler still running when the grace ends
// sees its context cancelled with ErrShutdown, and its job is failed with RETRY (error type
// worker_shutdown, retry_after 1 s), so another worker gets it; Run returns nil.
func TestShutdownGraceCancelsAndFailsWithRetry(t *testing.T) {
	srv := jobwiretest.StartServer(t)
	c := srv.Client()
	const q = "grace"
	var cause atomic.Value
	started := make(chan struct{}, 1)
	w := newWorker(t, c, jobwire.WorkerOptions{Queues: []string{q}, ShutdownGrace: 300 * time.Millisecond})
	jobwire.HandleRaw(w, "stuck", func(ctx context.Context, job *jobwire.Job[[]byte]) error {
		started <- struct{}{}
		<-ctx.Done()
		cause.Store(context.Cause(ctx))
		return context.Cause(ctx)
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	if _, err := c.Enqueue(context.Background(), q, "stuck", []byte("x"), jobwire.JobID("g-1"), jobwire.MaxAttempts(3)); err != nil {
		t.Fatal(err)
	}
	<-started
	stopped := time.Now()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Run did not return after the grace")
	}
	if took := time.Since(stopped); took < 300*time.Millisecond {
		t.Fatalf("Run returned %s after the stop, before the 300ms grace", took)
	}
	eventually(t, 5*time.Second, "the handler saw ErrShutdown", func() bool {
		err, _ := cause.Load().(error)
		return errors.Is(err, jobwire.ErrShutdown)
	})
	j, err := c.GetJob(context.Background(), q, "g-1")
	if err != nil {
		t.Fatal(err)
	}
	errs := j.GetErrors()
	if j.GetState() == pb.JobState_JOB_STATE_ACTIVE || j.GetState() == pb.JobState_JOB_STATE_COMPLETED || len(errs) != 1 ||
		errs[0].GetErrorType() != "worker_shutdown" || errs[0].GetDisposition() != pb.FailDisposition_FAIL_DISPOSITION_RETRY {
		t.Fatalf("job after the grace: %v, errors %v", j.GetState(), errs)
	}
	// retry_after 1 s: the job is ready again 1 s after the Fail (the server's own times).
	if wait := j.GetReadyTime().AsTime().Sub(errs[0].GetFailTime().AsTime()); wait < time.Second || wait > 1500*time.Millisecond {
		t.Fatalf("job ready %s after the shutdown's Fail, want retry_after 1s", wait)
	}
}

// TestLeaseLostResultIsDroppedAndWorkerGoesOn: a job deleted while its handler runs
// (DeleteQueue force) cannot be acked; the worker logs the loss, frees the slot and keeps
// serving (a later job on the queue completes).
func TestLeaseLostResultIsDroppedAndWorkerGoesOn(t *testing.T) {
	srv := jobwiretest.StartServer(t)
	c := srv.Client()
	const q = "lost"
	release := make(chan struct{})
	var calls atomic.Int32
	w := newWorker(t, c, jobwire.WorkerOptions{Queues: []string{q}, Concurrency: 1})
	jobwire.HandleRaw(w, "job", func(ctx context.Context, job *jobwire.Job[[]byte]) error {
		if calls.Add(1) == 1 {
			<-release
		}
		return nil
	})
	runWorker(t, w)
	ctx := context.Background()
	if _, err := c.Enqueue(ctx, q, "job", []byte("x"), jobwire.JobID("l-1")); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the first job running", func() bool { return calls.Load() == 1 })
	if _, err := c.DeleteQueue(ctx, q, true); err != nil {
		t.Fatal(err)
	}
	close(release)
	if _, err := c.Enqueue(ctx, q, "job", []byte("x"), jobwire.JobID("l-2")); err != nil {
		t.Fatal(err)
	}
	waitState(t, c, q, "l-2", pb.JobState_JOB_STATE_COMPLETED, 20*time.Second)
}

// TestRefusedOpenEndsRun: a stream the server refuses for good (an invalid queue name:
// INVALID_ARGUMENT) is not retried: Run returns the refusal.
func TestRefusedOpenEndsRun(t *testing.T) {
	srv := jobwiretest.StartServer(t)
	w := newWorker(t, srv.Client(), jobwire.WorkerOptions{Queues: []string{"not a valid queue!"}})
	done := make(chan error, 1)
	go func() { done <- w.Run(context.Background()) }()
	select {
	case err := <-done:
		if status.Code(err) != codes.InvalidArgument {
			t.Fatalf("Run: %v, want INVALID_ARGUMENT", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Run kept going after the server refused the stream")
	}
}
