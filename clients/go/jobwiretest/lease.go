package jobwiretest

import (
	"context"
	"encoding/json"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/jobwire/jobwire/clients/go"
	pb "github.com/jobwire/jobwire/clients/go/gen/jobwire/v1"
)

// Lease describes a fake lease for [RunHandler]. Payload is []byte (as is) or any value
// (JSON-encoded); zero fields get plausible values (attempt 1, a lease token, ...).
type Lease struct {
	Queue, JobID, Name string
	Payload            any
	Metadata           map[string]string
	Attempt            uint32
	MaxAttempts        uint32
	IdempotencyKey     string
	// The job's group key, and the checkpoint a previous attempt saved (Job.Checkpoint).
	GroupKey   string
	Checkpoint []byte
}

// RunHandler runs the handler w has for l.Name on a fake lease, without a server, and
// returns what the worker would send: Outcome.Ack (with Outcome.Result), or the Fail's
// disposition, retry_after and error, and the progress reports it made (Outcome.Reports;
// each saved at once). ctx is the handler's context.
func RunHandler(ctx context.Context, w *jobwire.Worker, l Lease) (jobwire.Outcome, error) {
	payload, ok := l.Payload.([]byte)
	if !ok && l.Payload != nil {
		b, err := json.Marshal(l.Payload)
		if err != nil {
			return jobwire.Outcome{}, err
		}
		payload = b
	}
	def := func(s, d string) string {
		if s == "" {
			return d
		}
		return s
	}
	attempt := max(l.Attempt, 1)
	lease := &pb.Lease{
		Job: &pb.Job{
			Queue: def(l.Queue, "test"), JobId: def(l.JobID, "job-1"), Name: l.Name, Payload: payload,
			Metadata: l.Metadata, State: pb.JobState_JOB_STATE_ACTIVE,
			MaxAttempts: max(l.MaxAttempts, attempt), AttemptsMade: attempt,
			GroupKey: l.GroupKey, Checkpoint: l.Checkpoint,
		},
		Attempt:        attempt,
		LeaseToken:     "fake-lease-token",
		LeaseDeadline:  timestamppb.New(time.Now().Add(30 * time.Second)),
		IdempotencyKey: def(l.IdempotencyKey, def(l.Queue, "test")+"/"+def(l.JobID, "job-1")),
	}
	return w.RunLease(ctx, lease), nil
}
