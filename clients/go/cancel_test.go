package jobwire_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/jobwire/jobwire/clients/go"
	pb "github.com/jobwire/jobwire/clients/go/gen/jobwire/v1"
	"github.com/jobwire/jobwire/clients/go/jobwiretest"
)

// Cancel, delete and expiry (issue 16): the conformance scenarios
// cancel_reaches_running_handler and cancel_delete_expire_from_client, and the API around them.

func cancelReachesRunningHandler(t *testing.T, sc scenario) {
	srv := jobwiretest.StartServer(t, sc.Server...)
	c := srv.Client()
	ctx := context.Background()
	const q, id = "cancel", "cancel-1"
	reason := sc.str("reason")
	started := make(chan struct{}, 4)
	signalled := make(chan error, 4)
	var calls counter
	w := newWorker(t, c, jobwire.WorkerOptions{Queues: []string{q}})
	jobwire.HandleRaw(w, "long", func(ctx context.Context, job *jobwire.Job[[]byte]) error {
		calls.add(job.ID)
		started <- struct{}{}
		select {
		case <-ctx.Done():
			signalled <- context.Cause(ctx)
			return context.Cause(ctx)
		case <-time.After(10 * time.Second):
			return errors.New("never told of the cancel")
		}
	})
	runWorker(t, w)
	if _, err := c.Enqueue(ctx, q, "long", []byte("x"), jobwire.JobID(id), jobwire.MaxAttempts(3)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-started:
	case <-time.After(20 * time.Second):
		t.Fatal("the handler did not start")
	}
	asked := time.Now()
	job, cancelled, err := c.CancelJob(ctx, q, id, reason)
	if err != nil || !cancelled {
		t.Fatalf("CancelJob of a running job: cancelled %v, err %v", cancelled, err)
	}
	if job.GetCancelTime() == nil || job.GetCancelReason() != reason {
		t.Errorf("CancelJob's job: cancel_time %v, reason %q", job.GetCancelTime(), job.GetCancelReason())
	}
	maxSignal := msDur(sc.ms("max_signal_ms"))
	select {
	case cause := <-signalled:
		if took := time.Since(asked); took > maxSignal {
			t.Errorf("the handler was told %s after the cancel, want within %s", took, maxSignal)
		}
		var ce *jobwire.CancelledError
		if !errors.Is(cause, jobwire.ErrJobCancelled) || !errors.As(cause, &ce) || ce.Reason != reason || ce.RevokeTime.IsZero() {
			t.Errorf("the handler's context cause: %v (%#v), want a *CancelledError with reason %q and a revoke time", cause, ce, reason)
		}
	case <-time.After(maxSignal + 5*time.Second):
		t.Fatalf("the handler was not told of the cancel")
	}
	j := waitState(t, c, q, id, pb.JobState_JOB_STATE_CANCELLED, 20*time.Second)
	if j.GetCancelReason() != reason || j.GetCancelTime() == nil {
		t.Errorf("cancelled job: reason %q, cancel_time %v", j.GetCancelReason(), j.GetCancelTime())
	}
	// Still CANCELLED and handled once a moment later: never run again.
	time.Sleep(300 * time.Millisecond)
	if j, err := c.GetJob(ctx, q, id); err != nil || j.GetState() != pb.JobState_JOB_STATE_CANCELLED || calls.get(id) != 1 {
		t.Errorf("after the cancel: state %v (err %v), handled %d times; want CANCELLED and once", j.GetState(), err, calls.get(id))
	}
}

func cancelDeleteExpireFromClient(t *testing.T, sc scenario) {
	srv := jobwiretest.StartServer(t, sc.Server...)
	c := srv.Client()
	ctx := context.Background()
	const q = "control"

	// A delayed job cancelled at once, then deleted; its id is free again.
	if _, err := c.Enqueue(ctx, q, "later", []byte("x"), jobwire.JobID("d-1"), jobwire.Delay(time.Hour)); err != nil {
		t.Fatal(err)
	}
	job, cancelled, err := c.CancelJob(ctx, q, "d-1", "not needed")
	if err != nil || !cancelled || job.GetState() != pb.JobState_JOB_STATE_CANCELLED || job.GetCancelReason() != "not needed" {
		t.Fatalf("CancelJob of a delayed job: %v cancelled=%v err=%v", job, cancelled, err)
	}
	if _, again, err := c.CancelJob(ctx, q, "d-1", "twice"); err != nil || again {
		t.Fatalf("a second CancelJob: cancelled=%v err=%v, want false and no error", again, err)
	}
	if _, _, err := c.CancelJob(ctx, q, "nope", ""); status.Code(err) != codes.NotFound {
		t.Fatalf("CancelJob of an unknown job: %v, want NOT_FOUND", err)
	}
	state, err := c.DeleteJob(ctx, q, "d-1")
	if err != nil || state != pb.JobState_JOB_STATE_CANCELLED {
		t.Fatalf("DeleteJob: %v, %v; want CANCELLED", state, err)
	}
	if _, err := c.GetJob(ctx, q, "d-1"); status.Code(err) != codes.NotFound {
		t.Fatalf("GetJob after DeleteJob: %v, want NOT_FOUND", err)
	}
	if r, err := c.Enqueue(ctx, q, "later", []byte("y"), jobwire.JobID("d-1")); err != nil || !r.Created {
		t.Fatalf("Enqueue of the deleted id: %+v, %v; want created", r, err)
	}

	// A job with a TTL on a queue no worker serves expires.
	ttl := msDur(sc.ms("ttl_ms"))
	r, err := c.Enqueue(ctx, q+"-idle", "short-lived", []byte("x"), jobwire.JobID("ttl-1"), jobwire.TTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	if r.Job.GetExpireTime() == nil {
		t.Errorf("the enqueued job has no expire_time")
	}
	j := waitState(t, c, q+"-idle", "ttl-1", pb.JobState_JOB_STATE_EXPIRED, msDur(sc.ms("wait_ms")))
	if j.GetExpireTime() == nil {
		t.Errorf("the expired job has no expire_time")
	}

	// CancelJobs by name: every waiting job of that name, none of another.
	const bq = "bulk"
	for i := 0; i < 3; i++ {
		if _, err := c.Enqueue(ctx, bq, "report", []byte("x"), jobwire.JobID(fmt.Sprintf("r-%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 2; i++ {
		if _, err := c.Enqueue(ctx, bq, "invoice", []byte("x"), jobwire.JobID(fmt.Sprintf("i-%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	got, err := c.CancelJobs(ctx, bq, &pb.JobFilter{Name: "report"}, "report retired")
	if err != nil || got.Cancelled != 3 || got.Signalled != 0 {
		t.Fatalf("CancelJobs by name: %+v, %v; want 3 cancelled", got, err)
	}
	for i := 0; i < 3; i++ {
		if j, _ := c.GetJob(ctx, bq, fmt.Sprintf("r-%d", i)); j.GetState() != pb.JobState_JOB_STATE_CANCELLED || j.GetCancelReason() != "report retired" {
			t.Errorf("r-%d: %v %q, want CANCELLED", i, j.GetState(), j.GetCancelReason())
		}
	}
	for i := 0; i < 2; i++ {
		if j, _ := c.GetJob(ctx, bq, fmt.Sprintf("i-%d", i)); j.GetState() != pb.JobState_JOB_STATE_WAITING {
			t.Errorf("i-%d: %v, want WAITING", i, j.GetState())
		}
	}
	if st, err := c.QueueStats(ctx, bq); err != nil || st.GetCancelled() != 3 || st.GetWaiting() != 2 {
		t.Errorf("queue stats: cancelled %d waiting %d (err %v), want 3 and 2", st.GetCancelled(), st.GetWaiting(), err)
	}
}

// TestCancelledHandlerThatFinishesCompletes: a handler told of a cancel that returns nil
// anyway completes the job (the Ack says it finished).
func TestCancelledHandlerThatFinishesCompletes(t *testing.T) {
	srv := jobwiretest.StartServer(t)
	c := srv.Client()
	const q = "cancel-ack"
	started := make(chan struct{}, 1)
	w := newWorker(t, c, jobwire.WorkerOptions{Queues: []string{q}})
	jobwire.HandleRaw(w, "n", func(ctx context.Context, job *jobwire.Job[[]byte]) error {
		started <- struct{}{}
		<-ctx.Done()
		if !errors.Is(context.Cause(ctx), jobwire.ErrJobCancelled) {
			return context.Cause(ctx)
		}
		job.SetResult([]byte("finished anyway"))
		return nil
	})
	runWorker(t, w)
	ctx := context.Background()
	if _, err := c.Enqueue(ctx, q, "n", []byte("x"), jobwire.JobID("ca-1")); err != nil {
		t.Fatal(err)
	}
	<-started
	if _, cancelled, err := c.CancelJob(ctx, q, "ca-1", "too late"); err != nil || !cancelled {
		t.Fatalf("CancelJob: %v %v", cancelled, err)
	}
	j := waitState(t, c, q, "ca-1", pb.JobState_JOB_STATE_COMPLETED, 20*time.Second)
	if string(j.GetResult()) != "finished anyway" {
		t.Errorf("result %q", j.GetResult())
	}
}

func TestEnqueueGroupKeyAndExpiry(t *testing.T) {
	srv := jobwiretest.StartServer(t)
	c := srv.Client()
	ctx := context.Background()
	at := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	r, err := c.Enqueue(ctx, "g", "n", []byte("x"), jobwire.JobID("e-1"), jobwire.GroupKey("acme"), jobwire.ExpireAt(at))
	if err != nil {
		t.Fatal(err)
	}
	j, err := c.GetJob(ctx, "g", "e-1")
	if err != nil {
		t.Fatal(err)
	}
	if j.GetGroupKey() != "acme" || !j.GetExpireTime().AsTime().Equal(at) || r.Job.GetGroupKey() != "acme" {
		t.Fatalf("group_key %q, expire_time %v; want acme, %v", j.GetGroupKey(), j.GetExpireTime().AsTime(), at)
	}
	_, err = c.Enqueue(ctx, "g", "n", []byte("x"), jobwire.ExpireAt(at), jobwire.TTL(time.Minute))
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("expire_time and ttl together: %v, want INVALID_ARGUMENT", err)
	}
}

func TestQueueConfigJobControlFields(t *testing.T) {
	srv := jobwiretest.StartServer(t)
	c := srv.Client()
	ctx := context.Background()
	gma := uint32(4)
	cfg, err := c.UpdateQueueConfig(ctx, "qc", &pb.QueueConfig{
		GroupMaxActive: &gma, CancelGrace: durationpb.New(5 * time.Second), DeadLetterExpired: true,
	}, "group_max_active", "cancel_grace", "dead_letter_expired")
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.QueueConfig(ctx, "qc")
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range []*pb.QueueConfig{cfg, got} {
		if x.GetGroupMaxActive() != 4 || x.GetCancelGrace().AsDuration() != 5*time.Second || !x.GetDeadLetterExpired() {
			t.Fatalf("queue config: %v", x)
		}
	}
}

// TestCancelledHandlerPastTheGraceLosesItsLease: a handler that ignores the cancel past the
// queue's cancel_grace has its lease revoked: the job is CANCELLED, its late ack is refused
// (logged), and the worker's slot serves the next job.
func TestCancelledHandlerPastTheGraceLosesItsLease(t *testing.T) {
	srv := jobwiretest.StartServer(t)
	c := srv.Client()
	ctx := context.Background()
	const q = "grace-over"
	if _, err := c.UpdateQueueConfig(ctx, q, &pb.QueueConfig{CancelGrace: durationpb.New(300 * time.Millisecond)}, "cancel_grace"); err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{}, 2)
	w := newWorker(t, c, jobwire.WorkerOptions{Queues: []string{q}})
	jobwire.HandleRaw(w, "stubborn", func(ctx context.Context, job *jobwire.Job[[]byte]) error {
		started <- struct{}{}
		time.Sleep(1500 * time.Millisecond) // ignores ctx
		job.SetResult([]byte("too late"))
		return nil
	})
	jobwire.HandleRaw(w, "next", func(ctx context.Context, job *jobwire.Job[[]byte]) error { return nil })
	runWorker(t, w)
	if _, err := c.Enqueue(ctx, q, "stubborn", []byte("x"), jobwire.JobID("s-1")); err != nil {
		t.Fatal(err)
	}
	<-started
	if _, cancelled, err := c.CancelJob(ctx, q, "s-1", "stop"); err != nil || !cancelled {
		t.Fatalf("CancelJob: %v %v", cancelled, err)
	}
	j := waitState(t, c, q, "s-1", pb.JobState_JOB_STATE_CANCELLED, 10*time.Second)
	if len(j.GetResult()) != 0 {
		t.Errorf("the revoked job kept a result: %q", j.GetResult())
	}
	if _, err := c.Enqueue(ctx, q, "next", []byte("x"), jobwire.JobID("n-1")); err != nil {
		t.Fatal(err)
	}
	waitState(t, c, q, "n-1", pb.JobState_JOB_STATE_COMPLETED, 20*time.Second)
	if j, _ := c.GetJob(ctx, q, "s-1"); j.GetState() != pb.JobState_JOB_STATE_CANCELLED {
		t.Errorf("s-1 after the late ack: %v, want CANCELLED", j.GetState())
	}
}
