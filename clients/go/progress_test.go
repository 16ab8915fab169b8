package jobwire_test

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"
	"time"

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
