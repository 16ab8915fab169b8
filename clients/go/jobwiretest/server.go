// Package jobwiretest holds test helpers for code that uses jobwire: [StartServer] runs a
// real jobwire server on free ports for one test, and [RunHandler] runs a worker's handler
// against a fake lease without any server.
package jobwiretest

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/jobwire/jobwire/clients/go"
)

// Server is a jobwire server started for a test; it is stopped (SIGKILL) when the test ends.
type Server struct {
	// Addr is the gRPC address, 127.0.0.1:PORT.
	Addr string
	// HTTPAddr is the HTTP port's address (/metrics, /healthz).
	HTTPAddr string
	// DataDir is the server's data directory (the embedded Redis lives there).
	DataDir string

	t    testing.TB
	bin  string
	args []string
	cmd  *exec.Cmd
	log  *os.File
}

// Binary is the jobwire binary the helpers run: $JOBWIRE_BIN, else `jobwire` on PATH.
func Binary() (string, error) {
	if b := os.Getenv("JOBWIRE_BIN"); b != "" {
		return b, nil
	}
	return exec.LookPath("jobwire")
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("jobwiretest: free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// StartServer starts `jobwire serve` on free ports with an embedded Redis in a temporary
// directory, plus the given extra flags (e.g. "--lease-duration", "1s"; a "--redis-url"
// replaces the embedded Redis), and waits until its health check says SERVING. The test
// fails when the binary is missing or does not become ready within 30 s.
func StartServer(t testing.TB, flags ...string) *Server {
	t.Helper()
	bin, err := Binary()
	if err != nil {
		t.Fatalf("jobwiretest: no jobwire binary (set JOBWIRE_BIN or put jobwire on PATH): %v", err)
	}
	dir := t.TempDir()
	s := &Server{
		Addr:     "127.0.0.1:" + strconv.Itoa(FreePort(t)),
		HTTPAddr: "127.0.0.1:" + strconv.Itoa(FreePort(t)),
		DataDir:  filepath.Join(dir, "data"),
		t:        t, bin: bin,
	}
	s.args = append([]string{"serve", "--grpc-addr", s.Addr, "--http-addr", s.HTTPAddr, "--data-dir", s.DataDir}, flags...)
	s.log, err = os.Create(filepath.Join(dir, "jobwire.log"))
	if err != nil {
		t.Fatalf("jobwiretest: %v", err)
	}
	t.Cleanup(func() {
		s.Kill()
		s.log.Close()
		if t.Failed() {
			if b, err := os.ReadFile(s.log.Name()); err == nil {
				t.Logf("jobwire server log (last 4 KiB):\n%s", tail(b, 4096))
			}
		}
	})
	s.Start()
	return s
}

// Start starts the server process (again, after Kill) with the same flags and ports, and
// waits until it serves.
func (s *Server) Start() {
	s.t.Helper()
	s.cmd = exec.Command(s.bin, s.args...)
	s.cmd.Stdout, s.cmd.Stderr = s.log, s.log
	s.cmd.Env = append(os.Environ(), "RUST_LOG=info")
	if err := s.cmd.Start(); err != nil {
		s.t.Fatalf("jobwiretest: start %s: %v", s.bin, err)
	}
	// Readiness: the gRPC health check on a plaintext server; on a TLS one (which may also
	// want a client certificate) the HTTP port's /readyz, which reports the same state.
	var err error
	if slices.Contains(s.args, "--tls-cert") {
		err = waitReady(s.HTTPAddr, 30*time.Second)
	} else {
		err = WaitServing(s.Addr, 30*time.Second)
	}
	if err != nil {
		s.t.Fatalf("jobwiretest: %v", err)
	}
}

// Kill stops the server at once (SIGKILL) and waits for it to exit. The embedded Redis is
// a child of the server and goes with it (use --redis-url to keep the data).
func (s *Server) Kill() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	_ = s.cmd.Wait()
	s.cmd = nil
}

// Stop asks the server to shut down gracefully (SIGTERM: it drains its worker streams and
// waits up to its --shutdown-grace for acks) and waits for it to exit, at most timeout;
// then it is killed. Returns the server's exit error, if any.
func (s *Server) Stop(timeout time.Duration) error {
	if s.cmd == nil || s.cmd.Process == nil {
		return nil
	}
	cmd := s.cmd
	s.cmd = nil
	_ = cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(timeout):
		_ = cmd.Process.Kill()
		<-done
		return fmt.Errorf("jobwire did not exit within %s of SIGTERM", timeout)
	}
}

// Client is a jobwire.Client for this server, closed when the test ends.
func (s *Server) Client(opts ...jobwire.Option) *jobwire.Client {
	s.t.Helper()
	c, err := jobwire.NewClient(s.Addr, opts...)
	if err != nil {
		s.t.Fatalf("jobwiretest: %v", err)
	}
	s.t.Cleanup(func() { c.Close() })
	return c
}

// WaitServing polls the gRPC health service at addr until it says SERVING (plaintext unless
// opts give other transport credentials).
func WaitServing(addr string, timeout time.Duration, opts ...grpc.DialOption) error {
	conn, err := grpc.NewClient(addr, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)...)
	if err != nil {
		return err
	}
	defer conn.Close()
	h := healthpb.NewHealthClient(conn)
	deadline := time.Now().Add(timeout)
	last := "no answer"
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		r, err := h.Check(ctx, &healthpb.HealthCheckRequest{})
		cancel()
		if err == nil && r.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			return nil
		}
		if err != nil {
			last = err.Error()
		} else {
			last = r.GetStatus().String()
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("jobwire at %s not SERVING after %s (last: %s)", addr, timeout, last)
}

// waitReady polls http://addr/readyz until it answers 200.
func waitReady(addr string, timeout time.Duration) error {
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(timeout)
	last := "no answer"
	for time.Now().Before(deadline) {
		resp, err := client.Get("http://" + addr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("jobwire at %s not ready after %s (last: %s)", addr, timeout, last)
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}
