// Command producer enqueues the example job every jobwire SDK's examples share
// (clients/conformance/README.md): "send-welcome" on queue "emails" with the payload
// {"to": "ada@example.com"}, job id "welcome:ada" and 3 attempts, on the server at
// $JOBWIRE_TARGET (default 127.0.0.1:50051). It prints "enqueued welcome:ada created true"
// (false when the job id existed: nothing changed). The body of main is the README's
// producer snippet.
//
//	JOBWIRE_TARGET=127.0.0.1:50051 go run ./examples/producer
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
	client, err := jobwire.NewClient(cmp.Or(os.Getenv("JOBWIRE_TARGET"), "127.0.0.1:50051"))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	r, err := client.Enqueue(context.Background(), "emails", "send-welcome", map[string]string{"to": "ada@example.com"},
		jobwire.JobID("welcome:ada"), jobwire.MaxAttempts(3)) // the job id makes a second enqueue a no-op
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("enqueued", r.Job.GetJobId(), "created", r.Created)
}
