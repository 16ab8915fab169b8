// Command worker handles the example job every jobwire SDK's examples share
// (clients/conformance/README.md): "send-welcome" jobs ({"to": "ada@example.com"}) on queue
// "emails", from the server at $JOBWIRE_TARGET (default 127.0.0.1:50051), printing
// "sending to <address> attempt <n>". On SIGTERM or SIGINT it drains (finishes the jobs it
// holds) and exits 0. The body of main is the README's worker snippet.
//
//	JOBWIRE_TARGET=127.0.0.1:50051 go run ./examples/worker
package main

import (
	"cmp"
	"context"
	"fmt"
	"log"
	"os"

	"github.com/jobwire/jobwire/clients/go"
)

func main() {
	type Welcome struct{ To string } // {"to": ...}: encoding/json matches keys case-insensitively

	client, err := jobwire.NewClient(cmp.Or(os.Getenv("JOBWIRE_TARGET"), "127.0.0.1:50051"))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	w := jobwire.NewWorker(client, jobwire.WorkerOptions{Queues: []string{"emails"}, Concurrency: 8})
	jobwire.Handle(w, "send-welcome", func(ctx context.Context, job *jobwire.Job[Welcome]) error {
		fmt.Println("sending to", job.Payload.To, "attempt", job.Attempt)
		return nil
	})
	if err := w.Run(context.Background()); err != nil { // until SIGTERM/SIGINT: drains held jobs, then returns
		log.Fatal(err)
	}
}
