package jobwire_test

import (
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jobwire/jobwire/clients/go/jobwiretest"
)

// TestExamplesProducerAndWorker runs the README's snippets (examples/producer and
// examples/worker) against a real server: the producer's job is handled by the worker,
// which exits 0 on SIGINT.
func TestExamplesProducerAndWorker(t *testing.T) {
	producer, worker := buildExample(t, "producer"), buildExample(t, "worker")
	srv := jobwiretest.StartServer(t)
	out, err := exec.Command(producer, "-server", srv.Addr, "-queue", "work", "-ms", "50").CombinedOutput()
	if err != nil {
		t.Fatalf("producer: %v\n%s", err, out)
	}
	fields := strings.Fields(string(out))
	if len(fields) != 2 || fields[1] != "JOB_STATE_WAITING" {
		t.Fatalf("producer printed %q, want '<job id> JOB_STATE_WAITING'", out)
	}
	stdout, stderr := newLineWaiter(), newLineWaiter()
	cmd := exec.Command(worker, "-server", srv.Addr, "-queue", "work")
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	stdout.wait(t, "done "+fields[0], 20*time.Second)
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("worker exit: %v\n%s", err, stderr)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("worker did not exit on SIGINT")
	}
}
