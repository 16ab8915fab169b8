package jobwire_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobwire/jobwire/clients/go"
	pb "github.com/jobwire/jobwire/clients/go/gen/jobwire/v1"
	"github.com/jobwire/jobwire/clients/go/jobwiretest"
)

func msDur(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }

func concurrencyNeverExceeded(t *testing.T, sc scenario) {
	srv := jobwiretest.StartServer(t, sc.Server...)
	c := srv.Client()
	ctx := context.Background()
	const q = "conc"
	conc, n, hd := int(sc.ms("concurrency")), int(sc.ms("jobs")), msDur(sc.ms("handler_ms"))
	for i := 1; i <= n; i++ {
		if _, err := c.Enqueue(ctx, q, "work", []byte("x"), jobwire.JobID(fmt.Sprintf("c-%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	var running, maxRunning atomic.Int32
	var calls counter
	w := newWorker(t, c, jobwire.WorkerOptions{Queues: []string{q}, Concurrency: conc})
	jobwire.HandleRaw(w, "work", func(ctx context.Context, job *jobwire.Job[[]byte]) error {
		calls.add(job.ID)
		r := running.Add(1)
		for m := maxRunning.Load(); r > m && !maxRunning.CompareAndSwap(m, r); m = maxRunning.Load() {
		}
		time.Sleep(hd)
		running.Add(-1)
		return nil
	})
	var maxActive atomic.Uint64
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			select {
			case <-stopSampling:
				return
			case <-time.After(20 * time.Millisecond):
			}
			if st, err := c.QueueStats(ctx, q); err == nil && st.GetActive() > maxActive.Load() {
				maxActive.Store(st.GetActive())
			}
		}
	}()
	runWorker(t, w)
	for i := 1; i <= n; i++ {
		j := waitState(t, c, q, fmt.Sprintf("c-%d", i), pb.JobState_JOB_STATE_COMPLETED, 30*time.Second)
		if j.GetAttemptsMade() != 1 || calls.get(j.GetJobId()) != 1 {
			t.Errorf("%s: attempts_made %d, handled %d times; want 1 and 1", j.GetJobId(), j.GetAttemptsMade(), calls.get(j.GetJobId()))
		}
	}
	close(stopSampling)
	<-sampled
	if got := maxRunning.Load(); got != int32(conc) {
		t.Errorf("most handlers running at once: %d, want exactly %d", got, conc)
	}
	if got := maxActive.Load(); got > uint64(conc) || got == 0 {
		t.Errorf("most active (leased) jobs sampled: %d, want 1..%d", got, conc)
	}
}

func longHandlerNotRedelivered(t *testing.T, sc scenario) {
	srv := jobwiretest.StartServer(t, sc.Server...)
	// The lease must live through the stream's heartbeats alone: no second stream, no
	// ExtendLease (the reconnect path would hide a stream the server dropped as silent).
	var ext counter
	var streams atomic.Int32
	c := srv.Client(extendCounter(&ext), subscribeCounter(&streams))
	const q = "long"
	var calls counter
	w := newWorker(t, c, jobwire.WorkerOptions{Queues: []string{q}, Concurrency: 2})
	jobwire.HandleRaw(w, "long", func(ctx context.Context, job *jobwire.Job[[]byte]) error {
		calls.add(job.ID)
		select {
		case <-time.After(msDur(sc.ms("handler_ms"))):
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	})
	runWorker(t, w)
	if _, err := c.Enqueue(context.Background(), q, "long", []byte("x"), jobwire.JobID("long-1"), jobwire.MaxAttempts(3)); err != nil {
		t.Fatal(err)
	}
	j := waitState(t, c, q, "long-1", pb.JobState_JOB_STATE_COMPLETED, 20*time.Second)
	if j.GetAttemptsMade() != 1 || calls.get("long-1") != 1 {
		t.Fatalf("attempts_made %d, delivered %d times; want 1 and 1", j.GetAttemptsMade(), calls.get("long-1"))
	}
	if streams.Load() != 1 || ext.get("long-1") != 0 {
		t.Fatalf("%d streams opened and %d ExtendLease calls: the stream did not keep the lease by itself", streams.Load(), ext.get("long-1"))
	}
}

func nonRetryableDeadLetters(t *testing.T, sc scenario) {
	srv := jobwiretest.StartServer(t, sc.Server...)
	c := srv.Client()
	const q = "nr"
	w := newWorker(t, c, jobwire.WorkerOptions{Queues: []string{q}})
	jobwire.Handle(w, "send", func(ctx context.Context, job *jobwire.Job[signup]) error {
		return jobwire.NonRetryable(fmt.Errorf("400 invalid address: %s", job.Payload.Email))
	})
	runWorker(t, w)
	ctx := context.Background()
	if _, err := c.Enqueue(ctx, q, "send", signup{UserID: "u4", Email: "u4@example,com"}, jobwire.JobID("nr-1"),
		jobwire.MaxAttempts(uint32(sc.ms("max_attempts")))); err != nil {
		t.Fatal(err)
	}
	j := waitState(t, c, q, "nr-1", pb.JobState_JOB_STATE_DEAD, 20*time.Second)
	errs := j.GetErrors()
	if j.GetAttemptsMade() != 1 || j.GetDeadReason() != pb.DeadReason_DEAD_REASON_NO_RETRY || len(errs) != 1 ||
		!strings.Contains(errs[0].GetMessage(), "400 invalid address: u4@example,com") {
		t.Fatalf("dead job: attempts_made %d, reason %v, errors %v", j.GetAttemptsMade(), j.GetDeadReason(), errs)
	}
	dead, err := c.ListDeadLetters(ctx, q, nil)
	if err != nil || len(dead) != 1 || dead[0].GetJobId() != "nr-1" {
		t.Fatalf("dead letters: %v (err %v), want just nr-1", dead, err)
	}
}

// timedRetry runs a handler that fails attempt 1 with fail(), then acks, and returns the
// time between the first handler's return and the second lease, and the second attempt's
// number.
func timedRetry(t *testing.T, sc scenario, q string, maxAttempts uint32, fail func() error) (time.Duration, uint32) {
	srv := jobwiretest.StartServer(t, sc.Server...)
	c := srv.Client()
	var mu sync.Mutex
	var failedAt, secondAt time.Time
	var second uint32
	var deliveries atomic.Int32
	w := newWorker(t, c, jobwire.WorkerOptions{Queues: []string{q}})
	jobwire.HandleRaw(w, "job", func(ctx context.Context, job *jobwire.Job[[]byte]) error {
		mu.Lock()
		defer mu.Unlock()
		if deliveries.Add(1) == 1 {
			failedAt = time.Now()
			return fail()
		}
		secondAt, second = time.Now(), job.Attempt
		return nil
	})
	runWorker(t, w)
	if _, err := c.Enqueue(context.Background(), q, "job", []byte("x"), jobwire.JobID(q+"-1"), jobwire.MaxAttempts(maxAttempts)); err != nil {
		t.Fatal(err)
	}
	j := waitState(t, c, q, q+"-1", pb.JobState_JOB_STATE_COMPLETED, 20*time.Second)
	mu.Lock()
	defer mu.Unlock()
	if deliveries.Load() != 2 {
		t.Fatalf("delivered %d times, want 2", deliveries.Load())
	}
	if j.GetAttemptsMade() != second {
		t.Errorf("attempts_made %d, second delivery was attempt %d", j.GetAttemptsMade(), second)
	}
	return secondAt.Sub(failedAt), second
}

func retryAfterHonoured(t *testing.T, sc scenario) {
	after := msDur(sc.ms("retry_after_ms"))
	gap, attempt := timedRetry(t, sc, "ra", 3, func() error { return jobwire.RetryAfter(after, errors.New("503 try later")) })
	if attempt != 2 {
		t.Errorf("second delivery is attempt %d, want 2", attempt)
	}
	if gap < after-msDur(sc.ms("slack_ms")) {
		t.Errorf("leased again %s after the fail, want at least %s", gap, after)
	}
}

func rateLimitedUsesNoAttempt(t *testing.T, sc scenario) {
	after := msDur(sc.ms("rate_limited_ms"))
	gap, attempt := timedRetry(t, sc, "rl", uint32(sc.ms("max_attempts")), func() error { return jobwire.RateLimited(after, false) })
	if attempt != 1 {
		t.Errorf("delivery after RateLimited is attempt %d, want 1 (no attempt used)", attempt)
	}
	if gap < after {
		t.Errorf("leased again %s after RateLimited, want at least %s", gap, after)
	}
}
