package jobwire_test

import (
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	pb "github.com/jobwire/jobwire/clients/go/gen/jobwire/v1"
	"github.com/jobwire/jobwire/clients/go/jobwiretest"
)

// TestExamplesProducerAndWorker runs the README's snippets (examples/producer and
// examples/worker) against a real server at $JOBWIRE_TARGET: the producer enqueues the
// conventions' job (a second run changes nothing), the worker handles it, and exits 0 on
// SIGINT.
func TestExamplesProducerAndWorker(t *testing.T) {
	producer, worker := buildExample(t, "producer"), buildExample(t, "worker")
	srv := jobwiretest.StartServer(t)
	env := append(os.Environ(), "JOBWIRE_TARGET="+srv.Addr)
	for _, want := range []string{"enqueued welcome:ada created true", "enqueued welcome:ada created false"} {
		cmd := exec.Command(producer)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("producer: %v\n%s", err, out)
		}
		if strings.TrimSpace(string(out)) != want {
			t.Fatalf("producer printed %q, want %q", out, want)
		}
	}
	stdout, stderr := newLineWaiter(), newLineWaiter()
	cmd := exec.Command(worker)
	cmd.Env, cmd.Stdout, cmd.Stderr = env, stdout, stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	stdout.wait(t, "sending to ada@example.com attempt 1", 20*time.Second)
	j := waitState(t, srv.Client(), "emails", "welcome:ada", pb.JobState_JOB_STATE_COMPLETED, 10*time.Second)
	if j.GetName() != "send-welcome" || j.GetMaxAttempts() != 3 || string(j.GetPayload()) != `{"to":"ada@example.com"}` {
		t.Fatalf("the example job: name %q, max_attempts %d, payload %s", j.GetName(), j.GetMaxAttempts(), j.GetPayload())
	}
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

// TestReadmeSnippetsAreTheExamples: the README's producer and worker blocks are, byte for
// byte, the bodies of main in examples/producer and examples/worker (which the test above
// runs), so the README cannot drift from tested code.
func TestReadmeSnippetsAreTheExamples(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	for heading, example := range map[string]string{
		"## A producer": "examples/producer/main.go",
		"## A worker":   "examples/worker/main.go",
	} {
		got := readmeBlock(t, string(readme), heading)
		if want := mainBody(t, example); got != want {
			t.Errorf("README.md, %q: its go block differs from the body of main in %s; copy it:\n%s", heading, example, want)
		}
	}
}

// readmeBlock is the first ```go block after the line starting with heading.
func readmeBlock(t *testing.T, readme, heading string) string {
	t.Helper()
	i := strings.Index(readme, "\n"+heading)
	if i < 0 {
		t.Fatalf("README.md has no %q section", heading)
	}
	rest := readme[i:]
	start := strings.Index(rest, "```go\n")
	if start < 0 {
		t.Fatalf("README.md, %q: no go block", heading)
	}
	rest = rest[start+len("```go\n"):]
	return rest[:strings.Index(rest, "```")]
}

// mainBody is the body of func main in the Go file at path, one tab of indentation removed.
func mainBody(t *testing.T, path string) string {
	t.Helper()
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := string(src)
	const open = "\nfunc main() {\n"
	start, end := strings.Index(s, open), strings.LastIndex(s, "\n}\n")
	if start < 0 || end < start {
		t.Fatalf("%s: no func main", path)
	}
	lines := strings.SplitAfter(s[start+len(open):end+1], "\n")
	for i, l := range lines {
		lines[i] = strings.TrimPrefix(l, "\t")
	}
	return strings.Join(lines, "")
}
