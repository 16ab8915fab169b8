package jobwire_test

import (
	"context"
	"log/slog"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/jobwire/jobwire/clients/go"
	"github.com/jobwire/jobwire/clients/go/jobwiretest"
)

// testLogger logs through t.Log until the test ends (later lines are dropped, as t.Log
// after the end panics).
func testLogger(t *testing.T) *slog.Logger {
	tw := &testWriter{t: t}
	t.Cleanup(func() { tw.mu.Lock(); tw.done = true; tw.mu.Unlock() })
	return slog.New(slog.NewTextHandler(tw, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type testWriter struct {
	mu   sync.Mutex
	t    *testing.T
	done bool
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

// newWorker is a worker with signal handling off and the test's logger.
func newWorker(t *testing.T, c *jobwire.Client, o jobwire.WorkerOptions) *jobwire.Worker {
	o.DisableSignalHandling = true
	if o.Logger == nil {
		o.Logger = testLogger(t)
	}
	if o.WorkerID == "" {
		o.WorkerID = "go-" + strings.ReplaceAll(t.Name(), "/", "-")
	}
	return jobwire.NewWorker(c, o)
}

// counter counts calls per key.
type counter struct {
	mu sync.Mutex
	m  map[string]int
}

func (c *counter) add(k string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]int{}
	}
	c.m[k]++
	return c.m[k]
}

func (c *counter) get(k string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[k]
}

// extendCounter counts the successful ExtendLease calls per job id of a client.
func extendCounter(ext *counter) jobwire.Option {
	return jobwire.WithDialOptions(grpc.WithChainUnaryInterceptor(
		func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			err := invoker(ctx, method, req, reply, cc, opts...)
			if err == nil && strings.HasSuffix(method, "/ExtendLease") {
				if r, ok := req.(interface{ GetJobId() string }); ok {
					ext.add(r.GetJobId())
				}
			}
			return err
		}))
}

// subscribeCounter counts the Subscribe streams a client opens.
func subscribeCounter(n *atomic.Int32) jobwire.Option {
	return jobwire.WithDialOptions(grpc.WithChainStreamInterceptor(
		func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			if strings.HasSuffix(method, "/Subscribe") {
				n.Add(1)
			}
			return streamer(ctx, desc, cc, method, opts...)
		}))
}

// startRedis runs a redis-server on a free port without persistence; killed at the end.
func startRedis(t *testing.T) string {
	t.Helper()
	port := jobwiretest.FreePort(t)
	cmd := exec.Command("redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", t.TempDir())
	if err := cmd.Start(); err != nil {
		t.Fatalf("redis-server: %v", err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	addr := "127.0.0.1:" + strconv.Itoa(port)
	eventually(t, 10*time.Second, "redis-server accepts connections", func() bool {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	return "redis://" + addr
}
