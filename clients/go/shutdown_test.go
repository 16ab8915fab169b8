package jobwire_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/jobwire/jobwire/clients/go"
	pb "github.com/jobwire/jobwire/clients/go/gen/jobwire/v1"
	"github.com/jobwire/jobwire/clients/go/jobwiretest"
)

// TestShutdownGraceCancelsAndHandsBack: a handler still running when the grace ends sees
// its context cancelled with ErrShutdown, and its job is handed back uncharged (RELEASE):
// waiting again at once, whatever its backoff, so another worker gets it; Run returns nil.
func TestShutdownGraceCancelsAndHandsBack(t *testing.T) {
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
	if j.GetState() != pb.JobState_JOB_STATE_WAITING || j.GetAttemptsMade() != 0 || len(j.GetErrors()) != 0 {
		t.Fatalf("job after the grace: %v, attempts_made %d, errors %v; want WAITING, 0, none",
			j.GetState(), j.GetAttemptsMade(), j.GetErrors())
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

// shutdownHandsBackUncharged: a handler that outlives the grace on a max_attempts 1 job; the
// worker hands the job back uncharged (RELEASE), so it is not dead-lettered and a second
// worker runs it as attempt 1.
func shutdownHandsBackUncharged(t *testing.T, sc scenario) {
	srv := jobwiretest.StartServer(t, sc.Server...)
	c := srv.Client()
	const q = "handback"
	bg := context.Background()
	var attempts []uint32
	var mu sync.Mutex
	started := make(chan struct{}, 1)
	first := newWorker(t, c, jobwire.WorkerOptions{Queues: []string{q}, ShutdownGrace: msDur(sc.ms("grace_ms"))})
	jobwire.HandleRaw(first, "slow", func(ctx context.Context, job *jobwire.Job[[]byte]) error {
		mu.Lock()
		attempts = append(attempts, job.Attempt)
		mu.Unlock()
		started <- struct{}{}
		select {
		case <-time.After(msDur(sc.ms("handler_ms"))):
		case <-ctx.Done():
		}
		return context.Cause(ctx)
	})
	ctx, cancel := context.WithCancel(bg)
	done := make(chan error, 1)
	go func() { done <- first.Run(ctx) }()
	if _, err := c.Enqueue(bg, q, "slow", []byte("x"), jobwire.JobID("held"), jobwire.MaxAttempts(uint32(sc.ms("max_attempts")))); err != nil {
		t.Fatal(err)
	}
	<-started
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	j, err := c.GetJob(bg, q, "held")
	if err != nil {
		t.Fatal(err)
	}
	if s := j.GetState(); (s != pb.JobState_JOB_STATE_WAITING && s != pb.JobState_JOB_STATE_ACTIVE) ||
		j.GetAttemptsMade() != 0 || len(j.GetErrors()) != 0 {
		t.Fatalf("after the shutdown: %v, attempts_made %d, errors %v; want WAITING, 0, none", s, j.GetAttemptsMade(), j.GetErrors())
	}
	if dead, err := c.ListDeadLetters(bg, q, nil); err != nil || len(dead) != 0 {
		t.Fatalf("dead letters: %v (err %v), want none", dead, err)
	}
	second := newWorker(t, c, jobwire.WorkerOptions{Queues: []string{q}, WorkerID: "go-second"})
	jobwire.HandleRaw(second, "slow", func(ctx context.Context, job *jobwire.Job[[]byte]) error {
		mu.Lock()
		attempts = append(attempts, job.Attempt)
		mu.Unlock()
		return nil
	})
	runWorker(t, second)
	j = waitState(t, c, q, "held", pb.JobState_JOB_STATE_COMPLETED, 20*time.Second)
	mu.Lock()
	defer mu.Unlock()
	if len(attempts) != 2 || attempts[0] != 1 || attempts[1] != 1 || j.GetAttemptsMade() != 1 {
		t.Fatalf("attempts seen %v, attempts_made %d; want [1 1] and 1", attempts, j.GetAttemptsMade())
	}
}
