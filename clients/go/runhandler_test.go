package jobwire_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jobwire/jobwire/clients/go"
	"github.com/jobwire/jobwire/clients/go/jobwiretest"
)

// TestRunHandlerRecordsResultAndReports: without a server, a handler's result and
// progress reports come back in the Outcome, and the checkpoint and group key reach it.
func TestRunHandlerRecordsResultAndReports(t *testing.T) {
	c, err := jobwire.NewClient("127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	w := jobwire.NewWorker(c, jobwire.WorkerOptions{Queues: []string{"q"}})
	jobwire.HandleRaw(w, "n", func(ctx context.Context, job *jobwire.Job[[]byte]) error {
		if string(job.Checkpoint) != "step-3" || job.GroupKey != "acme" {
			return jobwire.NonRetryable(errors.New("checkpoint or group key missing"))
		}
		if err := job.Progress(ctx, 60, "half"); err != nil {
			return err
		}
		if err := job.SaveCheckpoint(ctx, []byte("step-4")); err != nil {
			return err
		}
		job.SetResult([]byte("ok"))
		return nil
	})
	o, err := jobwiretest.RunHandler(context.Background(), w, jobwiretest.Lease{Name: "n", Checkpoint: []byte("step-3"), GroupKey: "acme"})
	if err != nil || !o.Ack || string(o.Result) != "ok" || len(o.Reports) != 2 {
		t.Fatalf("outcome %+v, err %v", o, err)
	}
	if *o.Reports[0].Progress != 60 || *o.Reports[0].Message != "half" || string(o.Reports[1].Checkpoint) != "step-4" {
		t.Fatalf("reports %+v", o.Reports)
	}
}
