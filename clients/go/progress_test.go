package jobwire_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/jobwire/jobwire/clients/go"
	pb "github.com/jobwire/jobwire/clients/go/gen/jobwire/v1"
	"github.com/jobwire/jobwire/clients/go/jobwiretest"
)

// Progress, checkpoints and results (issue 16): the conformance scenarios
// checkpoint_resumes_next_attempt and result_attached_at_ack, and the errors around them.

func checkpointResumesNextAttempt(t *testing.T, sc scenario) {
	srv := jobwiretest.StartServer(t, sc.Server...)
	c := srv.Client()
	const q, id = "ckpt", "ckpt-1"
	checkpoint := sc.str("checkpoint")
	first := uint32(sc.ms("first_progress"))
	const msg = "downloaded, converting"
	var mu sync.Mutex
	var seen [][]byte
	var reportErrs []error
	w := newWorker(t, c, jobwire.WorkerOptions{Queues: []string{q}})
	jobwire.HandleRaw(w, "convert", func(ctx context.Context, job *jobwire.Job[[]byte]) error {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, job.Checkpoint)
		if job.Attempt == 1 {
			reportErrs = append(reportErrs, job.Progress(ctx, first, msg), job.SaveCheckpoint(ctx, []byte(checkpoint)))
			return errors.New("converter crashed")
		}
		reportErrs = append(reportErrs, job.Progress(ctx, 100, ""))
		return nil
	})
	runWorker(t, w)
	if _, err := c.Enqueue(context.Background(), q, "convert", []byte("x"), jobwire.JobID(id), jobwire.MaxAttempts(2)); err != nil {
		t.Fatal(err)
	}
	j := waitState(t, c, q, id, pb.JobState_JOB_STATE_COMPLETED, 20*time.Second)
	mu.Lock()
	defer mu.Unlock()
	for i, err := range reportErrs {
		if err != nil {
			t.Errorf("report %d: %v", i, err)
		}
	}
	if len(seen) != 2 || seen[0] != nil || string(seen[1]) != checkpoint {
		t.Fatalf("checkpoints seen by the attempts: %q, want [nil %q]", seen, checkpoint)
	}
	if j.GetProgress() != 100 || j.GetProgressMessage() != msg || string(j.GetCheckpoint()) != checkpoint ||
		j.GetProgressTime() == nil || j.GetAttemptsMade() != 2 {
		t.Fatalf("GetJob: progress %d %q, checkpoint %q, progress_time %v, attempts %d", j.GetProgress(),
			j.GetProgressMessage(), j.GetCheckpoint(), j.GetProgressTime(), j.GetAttemptsMade())
	}
}

func resultAttachedAtAck(t *testing.T, sc scenario) {
	srv := jobwiretest.StartServer(t, sc.Server...)
	c := srv.Client()
	const q, id = "result", "result-1"
	w := newWorker(t, c, jobwire.WorkerOptions{Queues: []string{q}})
	jobwire.HandleRaw(w, "answer", func(ctx context.Context, job *jobwire.Job[[]byte]) error {
		job.SetResult([]byte("not this")) // replaced below: the last one counts
		job.SetResult([]byte(sc.str("result")))
		return nil
	})
	runWorker(t, w)
	if _, err := c.Enqueue(context.Background(), q, "answer", []byte("x"), jobwire.JobID(id)); err != nil {
		t.Fatal(err)
	}
	j := waitState(t, c, q, id, pb.JobState_JOB_STATE_COMPLETED, 20*time.Second)
	if string(j.GetResult()) != sc.str("result") {
		t.Fatalf("result %q, want %q", j.GetResult(), sc.str("result"))
	}
}

// TestProgressErrors: a report the server refuses comes back to the handler as that status
// (INVALID_ARGUMENT, RESOURCE_EXHAUSTED), and a unary report with a stale lease token is
// FAILED_PRECONDITION.
func TestProgressErrors(t *testing.T) {
	srv := jobwiretest.StartServer(t)
	c := srv.Client()
	const q = "progress-errors"
	errs := make(chan [2]error, 1)
	w := newWorker(t, c, jobwire.WorkerOptions{Queues: []string{q}})
	jobwire.HandleRaw(w, "n", func(ctx context.Context, job *jobwire.Job[[]byte]) error {
		errs <- [2]error{job.Progress(ctx, 101, "too far"), job.SaveCheckpoint(ctx, bytes.Repeat([]byte("x"), 1<<20))}
		return nil
	})
	runWorker(t, w)
	if _, err := c.Enqueue(context.Background(), q, "n", []byte("x"), jobwire.JobID("p-1")); err != nil {
		t.Fatal(err)
	}
	got := <-errs
	if status.Code(got[0]) != codes.InvalidArgument {
		t.Errorf("progress 101: %v, want INVALID_ARGUMENT", got[0])
	}
	if status.Code(got[1]) != codes.ResourceExhausted {
		t.Errorf("a 1 MiB checkpoint: %v, want RESOURCE_EXHAUSTED", got[1])
	}
	j := waitState(t, c, q, "p-1", pb.JobState_JOB_STATE_COMPLETED, 20*time.Second)
	if j.GetProgress() != 0 || len(j.GetCheckpoint()) != 0 {
		t.Errorf("refused reports saved something: progress %d, checkpoint %d bytes", j.GetProgress(), len(j.GetCheckpoint()))
	}
	p := uint32(5)
	err := c.ReportProgress(context.Background(), q, "p-1", "stale-token", jobwire.Report{Progress: &p})
	if status.Code(err) != codes.FailedPrecondition {
		t.Errorf("ReportProgress with a stale token: %v, want FAILED_PRECONDITION", err)
	}
}

// TestResultTooLargeFailsTheJob: an ack whose result the server refuses as too large is
// turned into a NO_RETRY Fail (error type result_too_large) instead of leaving the job
// leased.
func TestResultTooLargeFailsTheJob(t *testing.T) {
	srv := jobwiretest.StartServer(t)
	c := srv.Client()
	const q = "big-result"
	w := newWorker(t, c, jobwire.WorkerOptions{Queues: []string{q}})
	jobwire.HandleRaw(w, "n", func(ctx context.Context, job *jobwire.Job[[]byte]) error {
		job.SetResult(bytes.Repeat([]byte("r"), 1<<20))
		return nil
	})
	runWorker(t, w)
	if _, err := c.Enqueue(context.Background(), q, "n", []byte("x"), jobwire.JobID("big-1"), jobwire.MaxAttempts(3)); err != nil {
		t.Fatal(err)
	}
	j := waitState(t, c, q, "big-1", pb.JobState_JOB_STATE_DEAD, 20*time.Second)
	if errs := j.GetErrors(); len(errs) != 1 || errs[0].GetErrorType() != "result_too_large" || j.GetAttemptsMade() != 1 {
		t.Fatalf("dead job: attempts %d, errors %v", j.GetAttemptsMade(), errs)
	}
}

// TestProgressAfterTheStreamBrokeGoesUnary: a report made after the stream that leased the
// job was cut goes through the unary ReportProgress (the lease is an orphan now, renewed
// with ExtendLease), and is saved.
func TestProgressAfterTheStreamBrokeGoesUnary(t *testing.T) {
	srv := jobwiretest.StartServer(t)
	producer := srv.Client()
	p := startProxy(t, srv.Addr)
	var reports atomic.Int32
	c, err := jobwire.NewClient(p.addr(), jobwire.WithDialOptions(grpc.WithChainUnaryInterceptor(
		func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			err := invoker(ctx, method, req, reply, cc, opts...)
			if err == nil && strings.HasSuffix(method, "/ReportProgress") {
				reports.Add(1)
			}
			return err
		})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	const q = "orphan-progress"
	started, cut := make(chan struct{}, 1), make(chan struct{})
	errs := make(chan error, 1)
	w := newWorker(t, c, jobwire.WorkerOptions{Queues: []string{q}})
	jobwire.HandleRaw(w, "n", func(ctx context.Context, job *jobwire.Job[[]byte]) error {
		started <- struct{}{}
		<-cut
		err := job.Report(ctx, jobwire.Report{Progress: ptr(uint32(70)), Message: ptr("after the cut"), Checkpoint: []byte("c-7")})
		errs <- err
		return err
	})
	runWorker(t, w)
	if _, err := producer.Enqueue(context.Background(), q, "n", []byte("x"), jobwire.JobID("o-1")); err != nil {
		t.Fatal(err)
	}
	<-started
	p.cut()
	close(cut)
	if err := <-errs; err != nil {
		t.Fatalf("the report after the cut: %v", err)
	}
	j := waitState(t, producer, q, "o-1", pb.JobState_JOB_STATE_COMPLETED, 20*time.Second)
	if j.GetProgress() != 70 || j.GetProgressMessage() != "after the cut" || string(j.GetCheckpoint()) != "c-7" || j.GetAttemptsMade() != 1 {
		t.Fatalf("job: progress %d %q checkpoint %q attempts %d", j.GetProgress(), j.GetProgressMessage(), j.GetCheckpoint(), j.GetAttemptsMade())
	}
	if reports.Load() != 1 {
		t.Fatalf("%d unary ReportProgress calls, want 1", reports.Load())
	}
}

func ptr[T any](v T) *T { return &v }
