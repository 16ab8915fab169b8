package jobwire_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jobwire/jobwire/clients/go"
	pb "github.com/jobwire/jobwire/clients/go/gen/jobwire/v1"
	"github.com/jobwire/jobwire/clients/go/jobwiretest"
)

// buildExample builds ./examples/<name> into the test's temporary directory.
func buildExample(t *testing.T, name string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), name)
	out, err := exec.Command("go", "build", "-o", bin, "./examples/"+name).CombinedOutput()
	if err != nil {
		t.Fatalf("go build ./examples/%s: %v\n%s", name, err, out)
	}
	return bin
}

// lineWaiter collects a child's output lines and waits for one containing a string.
type lineWaiter struct {
	mu    sync.Mutex
	lines []string
	added chan struct{}
}

func newLineWaiter() *lineWaiter { return &lineWaiter{added: make(chan struct{}, 1)} }

func (l *lineWaiter) Write(p []byte) (int, error) {
	sc := bufio.NewScanner(bytes.NewReader(p))
	l.mu.Lock()
	for sc.Scan() {
		l.lines = append(l.lines, sc.Text())
	}
	l.mu.Unlock()
	select {
	case l.added <- struct{}{}:
	default:
	}
	return len(p), nil
}

func (l *lineWaiter) has(s string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, line := range l.lines {
		if strings.Contains(line, s) {
			return true
		}
	}
	return false
}

func (l *lineWaiter) wait(t *testing.T, s string, d time.Duration) {
	t.Helper()
	deadline := time.After(d)
	for !l.has(s) {
		select {
		case <-l.added:
		case <-time.After(20 * time.Millisecond):
		case <-deadline:
			t.Fatalf("no output line with %q within %s; got:\n%s", s, d, l.String())
		}
	}
}

func (l *lineWaiter) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

func sigtermDrains(t *testing.T, sc scenario) {
	bin := buildExample(t, "sleeper")
	srv := jobwiretest.StartServer(t, sc.Server...)
	c := srv.Client()
	ctx := context.Background()
	const q = "drain"
	hd := int(sc.ms("handler_ms"))
	if _, err := c.Enqueue(ctx, q, "sleep", map[string]int{"ms": hd}, jobwire.JobID("held"), jobwire.MaxAttempts(3)); err != nil {
		t.Fatal(err)
	}
	stdout, stderr := newLineWaiter(), newLineWaiter()
	cmd := exec.Command(bin, "-server", srv.Addr, "-queue", q, "-concurrency", "4")
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	stdout.wait(t, "started held attempt 1", 20*time.Second)
	time.Sleep(msDur(sc.ms("signal_after_ms")))
	signalled := time.Now()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// The worker logs "draining" once its Drain is queued on the stream; the short pause
	// lets the server read it before the second job exists.
	stderr.wait(t, "draining", 5*time.Second)
	time.Sleep(200 * time.Millisecond)
	if _, err := c.Enqueue(ctx, q, "sleep", map[string]int{"ms": 10}, jobwire.JobID("after-signal")); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("worker exited with %v; stderr:\n%s", err, stderr)
		}
	case <-time.After(25 * time.Second):
		t.Fatalf("worker still running 25 s after SIGTERM; stderr:\n%s", stderr)
	}
	took := time.Since(signalled)
	j, err := c.GetJob(ctx, q, "held")
	if err != nil {
		t.Fatal(err)
	}
	if j.GetState() != pb.JobState_JOB_STATE_COMPLETED || j.GetAttemptsMade() != 1 || !stdout.has("done held") {
		t.Fatalf("held job: %v, attempts_made %d; stdout:\n%s", j.GetState(), j.GetAttemptsMade(), stdout)
	}
	second, err := c.GetJob(ctx, q, "after-signal")
	if err != nil {
		t.Fatal(err)
	}
	if second.GetState() != pb.JobState_JOB_STATE_WAITING || second.GetAttemptsMade() != 0 || stdout.has("after-signal") {
		t.Fatalf("the job enqueued after SIGTERM was leased: %v, attempts_made %d", second.GetState(), second.GetAttemptsMade())
	}
	t.Logf("exited 0 %s after SIGTERM", took.Round(time.Millisecond))
}

func serverRestartMidRun(t *testing.T, sc scenario) {
	redisURL := startRedis(t)
	srv := jobwiretest.StartServer(t, append(append([]string{}, sc.Server...), "--redis-url", redisURL)...)
	producer := srv.Client()
	var ext counter
	c := srv.Client(extendCounter(&ext))
	ctx := context.Background()
	const q = "restart"
	n := int(sc.ms("jobs"))
	var calls counter
	var running atomic.Int32
	// The handlers run handler_ms, and at least until the server is back: on a slow machine
	// the restart may take longer than the handlers, and then an ack could legitimately come
	// before any renewal, which this scenario checks.
	back := make(chan struct{})
	w := newWorker(t, c, jobwire.WorkerOptions{Queues: []string{q}, Concurrency: int(sc.ms("concurrency"))})
	jobwire.HandleRaw(w, "work", func(ctx context.Context, job *jobwire.Job[[]byte]) error {
		calls.add(job.ID)
		running.Add(1)
		select {
		case <-time.After(msDur(sc.ms("handler_ms"))):
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		select {
		case <-back:
			time.Sleep(500 * time.Millisecond)
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	})
	for i := 1; i <= n; i++ {
		if _, err := producer.Enqueue(ctx, q, "work", []byte("x"), jobwire.JobID(fmt.Sprintf("r-%d", i)), jobwire.MaxAttempts(3)); err != nil {
			t.Fatal(err)
		}
	}
	runWorker(t, w)
	eventually(t, 10*time.Second, "every job's handler running", func() bool { return running.Load() == int32(n) })
	srv.Kill()
	time.Sleep(msDur(sc.ms("down_ms")))
	restarted := time.Now()
	srv.Start()
	close(back)
	t.Logf("server serving again %s after the restart began", time.Since(restarted).Round(time.Millisecond))
	for i := 1; i <= n; i++ {
		id := fmt.Sprintf("r-%d", i)
		j := waitState(t, producer, q, id, pb.JobState_JOB_STATE_COMPLETED, 30*time.Second)
		if j.GetAttemptsMade() != 1 || calls.get(id) != 1 {
			t.Errorf("%s: attempts_made %d, handled %d times; want 1 and 1", id, j.GetAttemptsMade(), calls.get(id))
		}
		if ext.get(id) == 0 {
			t.Errorf("%s: its lease was never renewed with ExtendLease after the restart", id)
		}
	}
}

func streamKilledByNetwork(t *testing.T, sc scenario) {
	srv := jobwiretest.StartServer(t, sc.Server...)
	producer := srv.Client()
	p := startProxy(t, srv.Addr)
	var ext counter
	c, err := jobwire.NewClient(p.addr(), extendCounter(&ext))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	const q = "netcut"
	var calls counter
	started := make(chan struct{}, 1)
	w := newWorker(t, c, jobwire.WorkerOptions{Queues: []string{q}, Concurrency: 2})
	jobwire.HandleRaw(w, "work", func(ctx context.Context, job *jobwire.Job[[]byte]) error {
		calls.add(job.ID)
		started <- struct{}{}
		select {
		case <-time.After(msDur(sc.ms("handler_ms"))):
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	})
	runWorker(t, w)
	if _, err := producer.Enqueue(context.Background(), q, "work", []byte("x"), jobwire.JobID("n-1"), jobwire.MaxAttempts(3)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-started:
	case <-time.After(20 * time.Second):
		t.Fatal("the job was not delivered")
	}
	time.Sleep(msDur(sc.ms("cut_after_ms")))
	p.cut()
	j := waitState(t, producer, q, "n-1", pb.JobState_JOB_STATE_COMPLETED, 30*time.Second)
	if j.GetAttemptsMade() != 1 || calls.get("n-1") != 1 {
		t.Fatalf("attempts_made %d, delivered %d times; want 1 and 1", j.GetAttemptsMade(), calls.get("n-1"))
	}
	if ext.get("n-1") == 0 {
		t.Fatal("the lease was not renewed with ExtendLease after the cut")
	}
	eventually(t, 10*time.Second, "a new stream through the proxy", func() bool {
		st, err := producer.QueueStats(context.Background(), q)
		return err == nil && st.GetWorkersConnected() == 1
	})
}

// TestServerDrainIsFollowed: the server is stopped gracefully (SIGTERM) while the worker
// holds a job: the worker gets Draining, finishes and acks the job within the server's
// grace (attempt 1, handled once), and after the server's restart it reconnects and serves
// a new job.
func TestServerDrainIsFollowed(t *testing.T) {
	redisURL := startRedis(t)
	srv := jobwiretest.StartServer(t, "--redis-url", redisURL, "--shutdown-grace", "10s")
	c := srv.Client()
	const q = "srvdrain"
	var calls counter
	started := make(chan string, 2)
	w := newWorker(t, c, jobwire.WorkerOptions{Queues: []string{q}, Concurrency: 2})
	jobwire.HandleRaw(w, "work", func(ctx context.Context, job *jobwire.Job[[]byte]) error {
		calls.add(job.ID)
		started <- job.ID
		if job.ID == "d-1" {
			time.Sleep(1500 * time.Millisecond)
		}
		return nil
	})
	runWorker(t, w)
	ctx := context.Background()
	if _, err := c.Enqueue(ctx, q, "work", []byte("x"), jobwire.JobID("d-1"), jobwire.MaxAttempts(3)); err != nil {
		t.Fatal(err)
	}
	if id := <-started; id != "d-1" {
		t.Fatalf("started %s", id)
	}
	if err := srv.Stop(20 * time.Second); err != nil {
		t.Fatalf("server stop: %v", err)
	}
	srv.Start()
	j := waitState(t, c, q, "d-1", pb.JobState_JOB_STATE_COMPLETED, 10*time.Second)
	if j.GetAttemptsMade() != 1 || calls.get("d-1") != 1 {
		t.Fatalf("attempts_made %d, handled %d times; want 1 and 1", j.GetAttemptsMade(), calls.get("d-1"))
	}
	if _, err := c.Enqueue(ctx, q, "work", []byte("x"), jobwire.JobID("d-2")); err != nil {
		t.Fatal(err)
	}
	waitState(t, c, q, "d-2", pb.JobState_JOB_STATE_COMPLETED, 30*time.Second)
}
