package jobwire_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/jobwire/jobwire/clients/go"
	pb "github.com/jobwire/jobwire/clients/go/gen/jobwire/v1"
	"github.com/jobwire/jobwire/clients/go/jobwiretest"
)

type signup struct {
	UserID string `json:"user_id"`
	Email  string `json:"email"`
}

// eventually polls probe every 20 ms until it returns true, failing the test after d.
func eventually(t *testing.T, d time.Duration, what string, probe func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !probe() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitState polls GetJob until the job is in state, and returns it.
func waitState(t *testing.T, c *jobwire.Client, queue, id string, state pb.JobState, d time.Duration) *pb.Job {
	t.Helper()
	var job *pb.Job
	eventually(t, d, "job "+id+" in "+state.String(), func() bool {
		j, err := c.GetJob(context.Background(), queue, id)
		if err != nil {
			t.Fatalf("GetJob: %v", err)
		}
		job = j
		return j.GetState() == state
	})
	return job
}

// runWorker runs w until the test ends (graceful stop, Run's error checked).
func runWorker(t *testing.T, w *jobwire.Worker) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Worker.Run: %v", err)
			}
		case <-time.After(40 * time.Second):
			t.Errorf("Worker.Run did not return after its context ended")
		}
	})
}

func TestEnqueueOptionsAndGetJob(t *testing.T) {
	srv := jobwiretest.StartServer(t)
	c := srv.Client()
	ctx := context.Background()
	r, err := c.Enqueue(ctx, "emails", "send", signup{UserID: "u1", Email: "u1@example.com"},
		jobwire.JobID("welcome:u1"), jobwire.Delay(time.Hour), jobwire.Priority(7), jobwire.MaxAttempts(4),
		jobwire.Backoff(jobwire.BackoffPolicy{Exponential: true, Delay: 50 * time.Millisecond, Jitter: 0.5, MaxDelay: time.Second}),
		jobwire.Metadata(map[string]string{"tenant": "acme"}))
	if err != nil {
		t.Fatal(err)
	}
	if !r.Created {
		t.Fatal("first Enqueue: created = false")
	}
	j, err := c.GetJob(ctx, "emails", "welcome:u1")
	if err != nil {
		t.Fatal(err)
	}
	if j.GetState() != pb.JobState_JOB_STATE_DELAYED || j.GetPriority() != 7 || j.GetMaxAttempts() != 4 ||
		j.GetContentType() != "application/json" || j.GetMetadata()["tenant"] != "acme" ||
		j.GetBackoff().GetKind() != pb.BackoffKind_BACKOFF_KIND_EXPONENTIAL || string(j.GetPayload()) != `{"user_id":"u1","email":"u1@example.com"}` {
		t.Fatalf("stored job does not carry the options: %v", j)
	}
	again, err := c.Enqueue(ctx, "emails", "send", []byte("other"), jobwire.JobID("welcome:u1"))
	if err != nil || again.Created || string(again.Job.GetPayload()) == "other" {
		t.Fatalf("duplicate Enqueue: created=%v err=%v", again.Created, err)
	}
	_, err = c.GetJob(ctx, "emails", "nope")
	if status.Code(err) != codes.NotFound {
		t.Fatalf("GetJob of a missing job: %v, want NOT_FOUND", err)
	}
}

func TestEnqueueBatchPerItemResults(t *testing.T) {
	srv := jobwiretest.StartServer(t)
	c := srv.Client()
	good, _ := jobwire.NewJobSpec("batch", "n", []byte("a"), jobwire.JobID("b1"))
	bad, _ := jobwire.NewJobSpec("batch", "n", []byte("b"), jobwire.Priority(5000))
	res, err := c.EnqueueBatch(context.Background(), []*pb.JobSpec{good, bad})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 2 || res[0].Err != nil || !res[0].Created || res[0].Job.GetJobId() != "b1" {
		t.Fatalf("item 0: %+v", res[0])
	}
	if status.Code(res[1].Err) != codes.InvalidArgument {
		t.Fatalf("item 1 (priority 5000): %v, want INVALID_ARGUMENT", res[1].Err)
	}
}

func TestWorkerTypedHandlerAcks(t *testing.T) {
	srv := jobwiretest.StartServer(t)
	c := srv.Client()
	w := jobwire.NewWorker(c, jobwire.WorkerOptions{Queues: []string{"emails"}, Concurrency: 2, WorkerID: "t-typed", DisableSignalHandling: true})
	var got atomic.Value
	jobwire.Handle(w, "send", func(ctx context.Context, job *jobwire.Job[signup]) error {
		got.Store(*job)
		return nil
	})
	runWorker(t, w)
	_, err := c.Enqueue(context.Background(), "emails", "send", signup{UserID: "u2", Email: "e"},
		jobwire.JobID("j2"), jobwire.Metadata(map[string]string{"k": "v"}))
	if err != nil {
		t.Fatal(err)
	}
	j := waitState(t, c, "emails", "j2", pb.JobState_JOB_STATE_COMPLETED, 10*time.Second)
	if j.GetAttemptsMade() != 1 {
		t.Fatalf("attempts_made %d", j.GetAttemptsMade())
	}
	job := got.Load().(jobwire.Job[signup])
	if job.Payload.UserID != "u2" || job.Attempt != 1 || job.IdempotencyKey == "" || job.Metadata["k"] != "v" || job.ID != "j2" {
		t.Fatalf("handler saw %+v", job)
	}
}

func TestErrorsMapToDispositions(t *testing.T) {
	w := jobwire.NewWorker(&jobwire.Client{}, jobwire.WorkerOptions{Queues: []string{"q"}})
	errBoom := errors.New("boom")
	jobwire.HandleRaw(w, "nr", func(context.Context, *jobwire.Job[[]byte]) error { return jobwire.NonRetryable(errBoom) })
	jobwire.HandleRaw(w, "ra", func(context.Context, *jobwire.Job[[]byte]) error { return jobwire.RetryAfter(time.Second, errBoom) })
	jobwire.HandleRaw(w, "rl", func(context.Context, *jobwire.Job[[]byte]) error {
		return jobwire.RateLimited(300*time.Millisecond, true)
	})
	jobwire.HandleRaw(w, "plain", func(context.Context, *jobwire.Job[[]byte]) error { return &net429{} })
	jobwire.HandleRaw(w, "panic", func(context.Context, *jobwire.Job[[]byte]) error { panic("oops") })
	jobwire.Handle(w, "typed", func(context.Context, *jobwire.Job[signup]) error { return nil })
	ctx := context.Background()
	cases := []struct {
		name, payload string
		disp          pb.FailDisposition
		after         time.Duration
		errType       string
	}{
		{"nr", "", pb.FailDisposition_FAIL_DISPOSITION_NO_RETRY, 0, "NonRetryable"},
		{"ra", "", pb.FailDisposition_FAIL_DISPOSITION_RETRY, time.Second, "RetryAfter"},
		{"rl", "", pb.FailDisposition_FAIL_DISPOSITION_RATE_LIMITED, 300 * time.Millisecond, "RateLimited"},
		{"plain", "", pb.FailDisposition_FAIL_DISPOSITION_RETRY, 0, "*jobwire_test.net429"},
		{"panic", "", pb.FailDisposition_FAIL_DISPOSITION_RETRY, 0, "panic: string"},
		{"typed", "not json", pb.FailDisposition_FAIL_DISPOSITION_NO_RETRY, 0, "*jobwire.DecodeError"},
		{"unregistered", "", pb.FailDisposition_FAIL_DISPOSITION_RETRY, 0, "no_handler"},
	}
	for _, tc := range cases {
		o, err := jobwiretest.RunHandler(ctx, w, jobwiretest.Lease{Name: tc.name, Payload: []byte(tc.payload)})
		if err != nil {
			t.Fatal(err)
		}
		if o.Ack || o.Disposition != tc.disp || o.RetryAfter != tc.after || o.Error.GetErrorType() != tc.errType {
			t.Errorf("%s: got ack=%v %v after %v type %q, want %v after %v type %q", tc.name, o.Ack, o.Disposition, o.RetryAfter, o.Error.GetErrorType(), tc.disp, tc.after, tc.errType)
		}
	}
	o, _ := jobwiretest.RunHandler(ctx, w, jobwiretest.Lease{Name: "rl"})
	if !o.PauseQueue {
		t.Error("RateLimited(d, true): pause_queue not set")
	}
	o, _ = jobwiretest.RunHandler(ctx, w, jobwiretest.Lease{Name: "panic"})
	if len(o.Error.GetDetails()) == 0 || len(o.Error.GetDetails()) > 8<<10 {
		t.Errorf("panic details: %d bytes, want a stack of at most 8 KiB", len(o.Error.GetDetails()))
	}
	o, _ = jobwiretest.RunHandler(ctx, w, jobwiretest.Lease{Name: "typed", Payload: signup{UserID: "x"}})
	if !o.Ack {
		t.Errorf("typed handler on a valid payload: %+v", o)
	}
}

// TestErrorTyperNamesTheErrorType: the caller's type (ErrorTyper) is the error type of
// NonRetryable, RetryAfter and RateLimited too (the conventions' table).
func TestErrorTyperNamesTheErrorType(t *testing.T) {
	w := jobwire.NewWorker(&jobwire.Client{}, jobwire.WorkerOptions{Queues: []string{"q"}})
	jobwire.HandleRaw(w, "nr", func(context.Context, *jobwire.Job[[]byte]) error {
		return jobwire.NonRetryable(fmt.Errorf("wrapped: %w", invalidAddress{}))
	})
	jobwire.HandleRaw(w, "ra", func(context.Context, *jobwire.Job[[]byte]) error {
		return jobwire.RetryAfter(time.Second, invalidAddress{})
	})
	jobwire.HandleRaw(w, "rl", func(context.Context, *jobwire.Job[[]byte]) error {
		return quotaExceeded{jobwire.RateLimited(time.Second, false)}
	})
	for name, want := range map[string]struct {
		errType string
		disp    pb.FailDisposition
	}{
		"nr": {"invalid_address", pb.FailDisposition_FAIL_DISPOSITION_NO_RETRY},
		"ra": {"invalid_address", pb.FailDisposition_FAIL_DISPOSITION_RETRY},
		"rl": {"quota_exceeded", pb.FailDisposition_FAIL_DISPOSITION_RATE_LIMITED},
	} {
		o, _ := jobwiretest.RunHandler(context.Background(), w, jobwiretest.Lease{Name: name})
		if o.Error.GetErrorType() != want.errType || o.Disposition != want.disp {
			t.Errorf("%s: got %v %q, want %v %q", name, o.Disposition, o.Error.GetErrorType(), want.disp, want.errType)
		}
	}
	o, _ := jobwiretest.RunHandler(context.Background(), w, jobwiretest.Lease{Name: "nr"})
	if o.Error.GetMessage() != "wrapped: 400 invalid address" {
		t.Errorf("NonRetryable's message: %q", o.Error.GetMessage())
	}
}

// TestNoHandlerFailsWithRetry: a job whose name has no handler on the worker is failed with
// RETRY, error type no_handler (a worker with the handler may come), against a real server.
func TestNoHandlerFailsWithRetry(t *testing.T) {
	srv := jobwiretest.StartServer(t)
	c := srv.Client()
	const q = "nohandler"
	w := newWorker(t, c, jobwire.WorkerOptions{Queues: []string{q}})
	jobwire.HandleRaw(w, "known", func(context.Context, *jobwire.Job[[]byte]) error { return nil })
	runWorker(t, w)
	ctx := context.Background()
	if _, err := c.Enqueue(ctx, q, "unknown", []byte("x"), jobwire.JobID("nh-1"), jobwire.MaxAttempts(3)); err != nil {
		t.Fatal(err)
	}
	var j *pb.Job
	eventually(t, 10*time.Second, "a failed attempt recorded", func() bool {
		var err error
		if j, err = c.GetJob(ctx, q, "nh-1"); err != nil {
			t.Fatal(err)
		}
		return len(j.GetErrors()) > 0
	})
	e := j.GetErrors()[0]
	if e.GetErrorType() != "no_handler" || e.GetDisposition() != pb.FailDisposition_FAIL_DISPOSITION_RETRY {
		t.Fatalf("no handler: error type %q, disposition %v", e.GetErrorType(), e.GetDisposition())
	}
}

type invalidAddress struct{}

func (invalidAddress) Error() string     { return "400 invalid address" }
func (invalidAddress) ErrorType() string { return "invalid_address" }

// quotaExceeded names the error type of the RateLimited it wraps.
type quotaExceeded struct{ err error }

func (q quotaExceeded) Error() string   { return "quota exceeded: " + q.err.Error() }
func (q quotaExceeded) Unwrap() error   { return q.err }
func (quotaExceeded) ErrorType() string { return "quota_exceeded" }

type net429 struct{}

func (*net429) Error() string { return "429 too many requests" }

func TestListJobsPagesAndListWorkersShowsTheStream(t *testing.T) {
	srv := jobwiretest.StartServer(t)
	c := srv.Client()
	ctx := context.Background()
	for _, e := range []struct {
		id  string
		pri int32
	}{{"a", 0}, {"b", 0}, {"hi", 5}} {
		if _, err := c.Enqueue(ctx, "listing", "x", []byte("payload"), jobwire.JobID(e.id), jobwire.Priority(e.pri)); err != nil {
			t.Fatal(err)
		}
	}
	// Lease order over two pages: the priority-5 job first, then FIFO; no payloads.
	first, err := c.ListJobs(ctx, "listing", pb.JobState_JOB_STATE_WAITING, 2, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(first.GetJobs()) != 2 || first.GetJobs()[0].GetJobId() != "hi" || first.GetJobs()[1].GetJobId() != "a" ||
		len(first.GetJobs()[0].GetPayload()) != 0 || first.GetNextPageToken() == "" {
		t.Fatalf("page 1: %v", first)
	}
	second, err := c.ListJobs(ctx, "listing", pb.JobState_JOB_STATE_WAITING, 2, first.GetNextPageToken(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(second.GetJobs()) != 1 || second.GetJobs()[0].GetJobId() != "b" {
		t.Fatalf("page 2: %v", second)
	}
	named, err := c.ListJobs(ctx, "listing", pb.JobState_JOB_STATE_WAITING, 0, "", &pb.ListJobsFilter{Name: "other"})
	if err != nil || len(named.GetJobs()) != 0 {
		t.Fatalf("filtered by another name: %v %v", named, err)
	}
	if _, err := c.ListJobs(ctx, "listing", pb.JobState_JOB_STATE_UNSPECIFIED, 0, "", nil); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("no state: %v, want INVALID_ARGUMENT", err)
	}

	w := jobwire.NewWorker(c, jobwire.WorkerOptions{Queues: []string{"idle-q"}, Concurrency: 3, WorkerID: "go-lister", DisableSignalHandling: true})
	runWorker(t, w)
	var stream *pb.WorkerStream
	eventually(t, 10*time.Second, "the worker's stream listed", func() bool {
		r, err := c.ListWorkers(ctx, "idle-q")
		if err != nil {
			t.Fatalf("ListWorkers: %v", err)
		}
		if len(r.GetStreams()) == 1 {
			stream = r.GetStreams()[0]
		}
		return stream != nil
	})
	if stream.GetWorkerId() != "go-lister" || stream.GetCredits() != 3 || stream.GetHeldLeases() != 0 ||
		len(stream.GetQueues()) != 1 || stream.GetQueues()[0] != "idle-q" || stream.GetReplicaId() == "" {
		t.Fatalf("stream: %v", stream)
	}
}
