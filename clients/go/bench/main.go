// Command bench measures the Go SDK on jobwire bench's end-to-end no-op scenario
// (`jobwire bench --only e2e --e2e 1x100 -n 20000`): n jobs of 16 bytes are pre-filled with
// EnqueueBatch (1000 per call) on a fresh queue that keeps no completed jobs, then one
// Worker with concurrency 100 and a no-op handler leases and acks them. It prints
//
//	go e2e 1x100: N jobs/s
//
// where N = n / (time from the first lease to the last ack). The last ack is the n-th
// Settled reply with code 0 on the worker's stream, counted by a gRPC stream interceptor.
//
//	go run ./bench -server 127.0.0.1:50051
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"log"
	"log/slog"
	"os"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	"github.com/jobwire/jobwire/clients/go"
	pb "github.com/jobwire/jobwire/clients/go/gen/jobwire/v1"
)

func main() {
	server := flag.String("server", "127.0.0.1:50051", "jobwire gRPC address")
	n := flag.Int("n", 20000, "jobs")
	concurrency := flag.Int("concurrency", 100, "the worker's concurrency (credits)")
	batch := flag.Int("batch", 1000, "jobs per EnqueueBatch call")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the run to this file")
	flag.Parse()
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			log.Fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			log.Fatal(err)
		}
		defer pprof.StopCPUProfile()
	}

	var acked atomic.Int64
	var first, last time.Time
	var once sync.Once
	done := make(chan struct{})
	target := int64(*n)
	countAcks := grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn,
		method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		s, err := streamer(ctx, desc, cc, method, opts...)
		if err != nil {
			return s, err
		}
		return &ackCounter{ClientStream: s, onAck: func() {
			if acked.Add(1) == target {
				last = time.Now()
				close(done)
			}
		}}, nil
	})
	quiet := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	c, err := jobwire.NewClient(*server, jobwire.WithDialOptions(countAcks), jobwire.WithLogger(quiet))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	queue := "bench-go-" + randomHex()
	keep := uint32(0)
	if _, err := c.UpdateQueueConfig(ctx, queue, &pb.QueueConfig{Retention: &pb.Retention{KeepCompleted: &keep}}, "retention"); err != nil {
		log.Fatalf("UpdateQueueConfig: %v", err)
	}
	payload := make([]byte, 16)
	for i := 0; i < *n; i += *batch {
		specs := make([]*pb.JobSpec, 0, *batch)
		for j := i; j < min(i+*batch, *n); j++ {
			s, _ := jobwire.NewJobSpec(queue, "noop", payload)
			specs = append(specs, s)
		}
		res, err := c.EnqueueBatch(ctx, specs)
		if err != nil {
			log.Fatalf("EnqueueBatch: %v", err)
		}
		for _, r := range res {
			if r.Err != nil {
				log.Fatalf("EnqueueBatch item: %v", r.Err)
			}
		}
	}
	w := jobwire.NewWorker(c, jobwire.WorkerOptions{Queues: []string{queue}, Concurrency: *concurrency,
		WorkerID: "bench-go", DisableSignalHandling: true})
	jobwire.HandleRaw(w, "noop", func(context.Context, *jobwire.Job[[]byte]) error {
		once.Do(func() { first = time.Now() })
		return nil
	})
	wctx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- w.Run(wctx) }()
	select {
	case <-done:
	case <-time.After(time.Duration(60+*n/500) * time.Second):
		log.Fatalf("timed out: %d of %d jobs acked", acked.Load(), *n)
	}
	stop()
	if err := <-ran; err != nil {
		log.Fatal(err)
	}
	secs := last.Sub(first).Seconds()
	fmt.Printf("go e2e 1x%d: %.0f jobs/s\n", *concurrency, float64(*n)/secs)
	_, _ = c.DeleteQueue(ctx, queue, true)
}

// ackCounter calls onAck for every Settled reply with code 0 on a Subscribe stream.
type ackCounter struct {
	grpc.ClientStream
	onAck func()
}

func (a *ackCounter) RecvMsg(m any) error {
	err := a.ClientStream.RecvMsg(m)
	if r, ok := m.(*pb.SubscribeResponse); ok && err == nil && r.GetSettled() != nil && r.GetSettled().GetCode() == 0 {
		a.onAck()
	}
	return err
}

func randomHex() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
