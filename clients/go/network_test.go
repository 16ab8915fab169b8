package jobwire_test

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobwire/jobwire/clients/go"
	pb "github.com/jobwire/jobwire/clients/go/gen/jobwire/v1"
	"github.com/jobwire/jobwire/clients/go/jobwiretest"
)

// proxy is a TCP proxy to a server whose connections the test can cut (both sockets
// closed) or freeze (kept open, nothing forwarded: a black-holed network path).
type proxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	conns  []net.Conn
	frozen map[net.Conn]bool
	cuts   int
}

func startProxy(t *testing.T, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, target: target, frozen: map[net.Conn]bool{}}
	t.Cleanup(func() { ln.Close(); p.cut() })
	go p.serve()
	return p
}

func (p *proxy) addr() string { return p.ln.Addr().String() }

func (p *proxy) serve() {
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("tcp", p.target)
		if err != nil {
			in.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, in, out)
		p.mu.Unlock()
		go p.pipe(out, in)
		go p.pipe(in, out)
	}
}

// cut closes both sockets of every connection made so far.
func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.cuts += len(p.conns) / 2
	p.conns = nil
}

// pipe copies from src to dst until either closes; while src is frozen, what it reads is
// dropped.
func (p *proxy) pipe(dst, src net.Conn) {
	defer dst.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if err != nil {
			return
		}
		p.mu.Lock()
		frozen := p.frozen[src]
		p.mu.Unlock()
		if frozen {
			continue
		}
		if _, err := dst.Write(buf[:n]); err != nil {
			return
		}
	}
}

// freeze stops forwarding on every connection made so far, leaving them open.
func (p *proxy) freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		p.frozen[c] = true
	}
}

// TestBlackholedConnectionRecovers: the network path freezes (no RST, nothing forwarded)
// while a job runs. The stall watchdog gives up on the stream whose ack gets no reply, gRPC
// keepalive (10 s ping, 5 s timeout) closes the dead connection, and the ack goes through a
// new one: the job completes once, attempt 1.
func TestBlackholedConnectionRecovers(t *testing.T) {
	srv := jobwiretest.StartServer(t)
	producer := srv.Client()
	p := startProxy(t, srv.Addr)
	c, err := jobwire.NewClient(p.addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	const q = "blackhole"
	var calls counter
	started := make(chan struct{}, 1)
	w := newWorker(t, c, jobwire.WorkerOptions{Queues: []string{q}, StallTimeout: time.Second})
	jobwire.HandleRaw(w, "work", func(ctx context.Context, job *jobwire.Job[[]byte]) error {
		calls.add(job.ID)
		started <- struct{}{}
		time.Sleep(500 * time.Millisecond)
		return nil
	})
	runWorker(t, w)
	if _, err := producer.Enqueue(context.Background(), q, "work", []byte("x"), jobwire.JobID("b-1"), jobwire.MaxAttempts(3)); err != nil {
		t.Fatal(err)
	}
	<-started
	p.freeze()
	frozen := time.Now()
	j := waitState(t, producer, q, "b-1", pb.JobState_JOB_STATE_COMPLETED, 40*time.Second)
	if j.GetAttemptsMade() != 1 || calls.get("b-1") != 1 {
		t.Fatalf("attempts_made %d, delivered %d times; want 1 and 1", j.GetAttemptsMade(), calls.get("b-1"))
	}
	t.Logf("acked %s after the freeze", time.Since(frozen).Round(time.Millisecond))
}

// TestCreditsAfterReconnect: after a cut, the new stream opens with the free slots only
// (concurrency 2, one job still held: 1 credit); when the held job is acked by the unary
// call, its slot is granted to the new stream, so two jobs run at once again.
func TestCreditsAfterReconnect(t *testing.T) {
	srv := jobwiretest.StartServer(t)
	producer := srv.Client()
	p := startProxy(t, srv.Addr)
	c, err := jobwire.NewClient(p.addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	const q = "regrant"
	started := make(chan struct{}, 1)
	var running, maxRunning atomic.Int32
	both := make(chan struct{})
	var bothOnce sync.Once
	w := newWorker(t, c, jobwire.WorkerOptions{Queues: []string{q}, Concurrency: 2})
	jobwire.HandleRaw(w, "held", func(ctx context.Context, job *jobwire.Job[[]byte]) error {
		started <- struct{}{}
		time.Sleep(1500 * time.Millisecond)
		return nil
	})
	jobwire.HandleRaw(w, "pair", func(ctx context.Context, job *jobwire.Job[[]byte]) error {
		r := running.Add(1)
		defer running.Add(-1)
		for m := maxRunning.Load(); r > m && !maxRunning.CompareAndSwap(m, r); m = maxRunning.Load() {
		}
		if r == 2 {
			bothOnce.Do(func() { close(both) })
		}
		select { // wait (a bounded time) for the other one to run alongside
		case <-both:
		case <-time.After(3 * time.Second):
		}
		return nil
	})
	runWorker(t, w)
	ctx := context.Background()
	if _, err := producer.Enqueue(ctx, q, "held", []byte("x"), jobwire.JobID("h-1"), jobwire.MaxAttempts(3)); err != nil {
		t.Fatal(err)
	}
	<-started
	time.Sleep(200 * time.Millisecond)
	p.cut()
	j := waitState(t, producer, q, "h-1", pb.JobState_JOB_STATE_COMPLETED, 20*time.Second)
	if j.GetAttemptsMade() != 1 {
		t.Fatalf("held job: attempts_made %d", j.GetAttemptsMade())
	}
	for _, id := range []string{"p-1", "p-2"} {
		if _, err := producer.Enqueue(ctx, q, "pair", []byte("x"), jobwire.JobID(id)); err != nil {
			t.Fatal(err)
		}
	}
	waitState(t, producer, q, "p-1", pb.JobState_JOB_STATE_COMPLETED, 20*time.Second)
	waitState(t, producer, q, "p-2", pb.JobState_JOB_STATE_COMPLETED, 20*time.Second)
	if got := maxRunning.Load(); got != 2 {
		t.Fatalf("most jobs running at once after the reconnect: %d, want 2 (the freed slot was not granted)", got)
	}
}
