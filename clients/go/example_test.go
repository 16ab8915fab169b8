package jobwire_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http"
	"time"

	"github.com/jobwire/jobwire/clients/go"
)

// These examples compile with the package (godoc shows them); the README's producer and
// worker are examples/producer and examples/worker, which TestExamplesProducerAndWorker runs
// against a real server.

func ExampleClient_Enqueue() {
	client, err := jobwire.NewClient("127.0.0.1:50051")
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	r, err := client.Enqueue(context.Background(), "emails", "send-welcome-email",
		map[string]string{"user_id": "user_1", "email": "user_1@example.com"},
		jobwire.JobID("welcome-email:user_1"), // the idempotency key: a second Enqueue changes nothing
		jobwire.MaxAttempts(3),
		jobwire.Backoff(jobwire.BackoffPolicy{Exponential: true, Delay: time.Second, Jitter: 1}),
		jobwire.Metadata(map[string]string{"tenant": "acme"}))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(r.Job.GetJobId(), r.Created)
}

type welcome struct {
	UserID string `json:"user_id"`
	Email  string `json:"email"`
}

func sendEmail(ctx context.Context, to, idempotencyKey string) (*http.Response, error) {
	return nil, errors.New("not in an example")
}

func ExampleHandle() {
	client, err := jobwire.NewClient("127.0.0.1:50051")
	if err != nil {
		log.Fatal(err)
	}
	w := jobwire.NewWorker(client, jobwire.WorkerOptions{Queues: []string{"emails"}, Concurrency: 8})
	jobwire.Handle(w, "send-welcome-email", func(ctx context.Context, job *jobwire.Job[welcome]) error {
		resp, err := sendEmail(ctx, job.Payload.Email, job.IdempotencyKey)
		switch {
		case err != nil:
			return err // retried per the job's backoff
		case resp.StatusCode == http.StatusTooManyRequests:
			return jobwire.RateLimited(30*time.Second, true) // no attempt used; the queue pauses
		case resp.StatusCode == http.StatusBadRequest:
			return jobwire.NonRetryable(fmt.Errorf("invalid address %q", job.Payload.Email))
		case resp.StatusCode >= 500:
			return jobwire.RetryAfter(time.Minute, fmt.Errorf("provider: %s", resp.Status))
		}
		return nil
	})
	if err := w.Run(context.Background()); err != nil { // until SIGTERM/SIGINT, then drains
		log.Fatal(err)
	}
}
