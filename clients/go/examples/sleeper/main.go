// Command sleeper is a small jobwire worker: it handles "sleep" jobs ({"ms": N}) on a queue,
// printing "started <job id> attempt <n>" and "done <job id>" on stdout, and shuts down
// gracefully on SIGTERM or SIGINT (Drain, finish held jobs, exit 0). The conformance test
// sigterm_drains runs it as a child process.
//
//	go run ./examples/sleeper -server 127.0.0.1:50051 -queue work -concurrency 4
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"time"

	"github.com/jobwire/jobwire/clients/go"
)

// Sleep is the payload of a "sleep" job.
type Sleep struct {
	MS int `json:"ms"`
}

func main() {
	server := flag.String("server", "127.0.0.1:50051", "jobwire gRPC address")
	queue := flag.String("queue", "work", "queue to lease from")
	concurrency := flag.Int("concurrency", 4, "jobs handled at once")
	flag.Parse()

	client, err := jobwire.NewClient(*server)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	w := jobwire.NewWorker(client, jobwire.WorkerOptions{Queues: []string{*queue}, Concurrency: *concurrency})
	jobwire.Handle(w, "sleep", func(ctx context.Context, job *jobwire.Job[Sleep]) error {
		fmt.Printf("started %s attempt %d\n", job.ID, job.Attempt)
		select {
		case <-time.After(time.Duration(job.Payload.MS) * time.Millisecond):
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		fmt.Printf("done %s\n", job.ID)
		return nil
	})
	if err := w.Run(context.Background()); err != nil { // returns after SIGTERM/SIGINT
		log.Fatal(err)
	}
}
