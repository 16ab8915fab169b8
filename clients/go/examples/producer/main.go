// Command producer enqueues one "sleep" job and prints its id and state.
//
//	go run ./examples/producer -server 127.0.0.1:50051 -queue work -ms 500
package main

import (
	"context"
	"flag"
	"fmt"
	"log"

	"github.com/jobwire/jobwire/clients/go"
)

func main() {
	server := flag.String("server", "127.0.0.1:50051", "jobwire gRPC address")
	queue := flag.String("queue", "work", "queue")
	ms := flag.Int("ms", 500, "how long the job sleeps")
	flag.Parse()

	client, err := jobwire.NewClient(*server)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	r, err := client.Enqueue(context.Background(), *queue, "sleep", map[string]int{"ms": *ms},
		jobwire.MaxAttempts(3))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(r.Job.GetJobId(), r.Job.GetState())
}
