package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/jobwire/jobwire/clients/go"
	pb "github.com/jobwire/jobwire/clients/go/gen/jobwire/v1"
)

// run is what one queue and its provider went through, shared by (b) and (c).
type run struct {
	queue    string
	provider *provider
	jobs     map[string]string // job id -> user id
	mu       sync.Mutex
	keys     map[string]map[string]bool // job id -> idempotency keys seen
	problems []string
}

func newRun(slug string) *run {
	return &run{queue: "signups-" + slug + "-" + randomHex(), provider: newProvider(),
		jobs: map[string]string{}, keys: map[string]map[string]bool{}}
}

func (r *run) problem(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.problems = append(r.problems, fmt.Sprintf(format, args...))
}

func (r *run) checkKeys(label string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for id, keys := range r.keys {
		if len(keys) != 1 {
			r.problems = append(r.problems, fmt.Sprintf("%s: idempotency_key of %q changed across attempts: %v", label, id, keys))
		}
	}
	if n := r.provider.duplicates; n > 0 {
		fmt.Printf("note [%s]: the provider deduped %d repeated send(s) by idempotency key\n", label, n)
	}
}

func (d *demo) enqueue(ctx context.Context, r *run) error {
	backoff := jobwire.Backoff(jobwire.BackoffPolicy{Exponential: true, Delay: 50 * time.Millisecond, Jitter: 0.5, MaxDelay: time.Second})
	for i := 1; i <= signups; i++ {
		user := fmt.Sprintf("user_%d", i)
		email := user + "@example.com"
		if badAddresses[user] {
			email = user + "@example,com"
		}
		id := "welcome-email:" + user
		res, err := d.c.Enqueue(ctx, r.queue, jobName, Signup{UserID: user, Email: email}, jobwire.JobID(id),
			jobwire.Metadata(map[string]string{"demo": "signup"}), jobwire.MaxAttempts(maxAttempts), backoff)
		if err != nil {
			return fmt.Errorf("enqueue %s: %w", id, err)
		}
		if !res.Created {
			return fmt.Errorf("enqueue of %q on fresh queue %s said created=false", id, r.queue)
		}
		r.jobs[id] = user
	}
	return nil
}

// work runs two workers until every job of r is COMPLETED or DEAD, then stops them.
func (d *demo) work(ctx context.Context, r *run, classify bool, label string) error {
	handler := func(ctx context.Context, job *jobwire.Job[Signup]) error {
		r.mu.Lock()
		if job.IdempotencyKey == "" {
			r.problems = append(r.problems, fmt.Sprintf("lease of %q attempt %d has no idempotency_key", job.ID, job.Attempt))
		}
		if r.keys[job.ID] == nil {
			r.keys[job.ID] = map[string]bool{}
		}
		r.keys[job.ID][job.IdempotencyKey] = true
		r.mu.Unlock()
		err := r.provider.send(job.Payload.UserID, job.Payload.Email, job.IdempotencyKey)
		var bad rejectedAddress
		if classify && errors.As(err, &bad) {
			return jobwire.NonRetryable(err)
		}
		return err
	}
	wctx, stop := context.WithCancel(ctx)
	errs := make(chan error, workers)
	for i := 1; i <= workers; i++ {
		w := jobwire.NewWorker(d.c, jobwire.WorkerOptions{
			Queues: []string{r.queue}, Concurrency: d.credits, WorkerID: fmt.Sprintf("signup-demo-%s-%d", label, i),
			DisableSignalHandling: true,
		})
		jobwire.Handle(w, jobName, handler)
		go func() { errs <- w.Run(wctx) }()
	}
	err := d.settle(ctx, r)
	stop()
	for i := 0; i < workers; i++ {
		if werr := <-errs; werr != nil && err == nil {
			err = fmt.Errorf("worker: %w", werr)
		}
	}
	return err
}

// settle polls GetJob until every job is COMPLETED or DEAD.
func (d *demo) settle(ctx context.Context, r *run) error {
	deadline := time.Now().Add(d.timeout)
	for {
		var pending []string
		for id := range r.jobs {
			j, err := d.c.GetJob(ctx, r.queue, id)
			if err != nil {
				return fmt.Errorf("GetJob %s: %w", id, err)
			}
			if s := j.GetState(); s != pb.JobState_JOB_STATE_COMPLETED && s != pb.JobState_JOB_STATE_DEAD {
				pending = append(pending, fmt.Sprintf("%s %v (attempts %d/%d)", id, s, j.GetAttemptsMade(), j.GetMaxAttempts()))
			}
		}
		if len(pending) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			slices.Sort(pending)
			return fmt.Errorf("jobs on %s not settled after %s: %v", r.queue, d.timeout, pending)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// row reads the run's numbers; ListDeadLetters must agree with GetJob's DEAD states.
func (d *demo) row(ctx context.Context, r *run, strategy string) (row, error) {
	dead, err := d.c.ListDeadLetters(ctx, r.queue, nil)
	if err != nil {
		return row{}, err
	}
	var listed, byState []string
	for _, j := range dead {
		listed = append(listed, j.GetJobId())
	}
	for id := range r.jobs {
		j, err := d.c.GetJob(ctx, r.queue, id)
		if err != nil {
			return row{}, err
		}
		if j.GetState() == pb.JobState_JOB_STATE_DEAD {
			byState = append(byState, id)
		}
	}
	slices.Sort(listed)
	slices.Sort(byState)
	if !slices.Equal(listed, byState) {
		r.problem("%s: ListDeadLetters has %v, GetJob says DEAD for %v", strategy, listed, byState)
	}
	kinds := map[string]int{}
	for _, j := range dead {
		if errs := j.GetErrors(); len(errs) > 0 {
			kinds[errs[len(errs)-1].GetErrorType()]++
		}
	}
	fmt.Printf("dead letters [%s] queue %s: %d, by error type: %v\n", strategy, r.queue, len(dead), kinds)
	return row{strategy: strategy, emailed: r.provider.emailed(), dead: len(dead), requests: r.provider.requests()}, nil
}
