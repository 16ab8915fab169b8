package jobwire_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jobwire/jobwire/clients/go"
	pb "github.com/jobwire/jobwire/clients/go/gen/jobwire/v1"
	"github.com/jobwire/jobwire/clients/go/jobwiretest"
)

// Groups (issue 16): the conformance scenario group_key_and_pause_group.

func groupKeyAndPauseGroup(t *testing.T, sc scenario) {
	srv := jobwiretest.StartServer(t, sc.Server...)
	c := srv.Client()
	ctx := context.Background()
	const q = "tenants"
	pause := msDur(sc.ms("pause_ms"))
	type lease struct {
		at    time.Time
		group string
	}
	var mu sync.Mutex
	leased := map[string][]lease{}
	var limitedAt time.Time
	limited := make(chan struct{})
	var once sync.Once
	w := newWorker(t, c, jobwire.WorkerOptions{Queues: []string{q}, Concurrency: 4})
	jobwire.HandleRaw(w, "call-api", func(ctx context.Context, job *jobwire.Job[[]byte]) error {
		mu.Lock()
		leased[job.ID] = append(leased[job.ID], lease{at: time.Now(), group: job.GroupKey})
		first := job.ID == "a-1" && len(leased[job.ID]) == 1
		if first {
			limitedAt = time.Now()
		}
		mu.Unlock()
		if first {
			defer once.Do(func() { close(limited) })
			return jobwire.RateLimitedGroup(pause)
		}
		return nil
	})
	runWorker(t, w)
	if _, err := c.Enqueue(ctx, q, "call-api", []byte("x"), jobwire.JobID("a-1"), jobwire.GroupKey("tenant-a"), jobwire.MaxAttempts(1)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-limited:
	case <-time.After(20 * time.Second):
		t.Fatal("the tenant-a job was not leased")
	}
	// The Fail (with pause_group) is applied once a-1 is no longer ACTIVE.
	eventually(t, 10*time.Second, "a-1 handed back", func() bool {
		j, err := c.GetJob(ctx, q, "a-1")
		return err == nil && j.GetState() != pb.JobState_JOB_STATE_ACTIVE
	})
	// After the 429: another tenant-a job and a tenant-b job.
	if _, err := c.Enqueue(ctx, q, "call-api", []byte("x"), jobwire.JobID("a-2"), jobwire.GroupKey("tenant-a")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Enqueue(ctx, q, "call-api", []byte("x"), jobwire.JobID("b-1"), jobwire.GroupKey("tenant-b")); err != nil {
		t.Fatal(err)
	}
	b := waitState(t, c, q, "b-1", pb.JobState_JOB_STATE_COMPLETED, 20*time.Second)
	if b.GetGroupKey() != "tenant-b" {
		t.Errorf("b-1 group_key %q", b.GetGroupKey())
	}
	// tenant-b went on while tenant-a waits out its pause.
	for _, id := range []string{"a-1", "a-2"} {
		if j, err := c.GetJob(ctx, q, id); err != nil || j.GetState() == pb.JobState_JOB_STATE_COMPLETED {
			t.Errorf("%s is %v (err %v) when b-1 completed: want it still waiting for the group's pause", id, j.GetState(), err)
		}
	}
	for _, id := range []string{"a-1", "a-2"} {
		j := waitState(t, c, q, id, pb.JobState_JOB_STATE_COMPLETED, 20*time.Second)
		if j.GetGroupKey() != "tenant-a" || j.GetAttemptsMade() != 1 {
			t.Errorf("%s: group_key %q attempts_made %d, want tenant-a and 1", id, j.GetGroupKey(), j.GetAttemptsMade())
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for _, id := range []string{"a-1", "a-2"} {
		last := leased[id][len(leased[id])-1]
		if gap := last.at.Sub(limitedAt); gap < pause-50*time.Millisecond {
			t.Errorf("%s leased %s after the group was paused for %s", id, gap, pause)
		}
		if last.group != "tenant-a" {
			t.Errorf("%s: the handler saw group %q", id, last.group)
		}
	}
	if len(leased["b-1"]) != 1 || leased["b-1"][0].group != "tenant-b" {
		t.Errorf("b-1 leases: %+v", leased["b-1"])
	}
}
