package jobwire_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/jobwire/jobwire/clients/go"
	pb "github.com/jobwire/jobwire/clients/go/gen/jobwire/v1"
	"github.com/jobwire/jobwire/clients/go/jobwiretest"
)

// TestTLSAndToken runs a producer and a worker over TLS with a bearer token against a
// server with --tls-cert/--tls-key and --auth-file (certificates from scripts/dev-certs.sh),
// and checks that a call without the token is refused.
func TestTLSAndToken(t *testing.T) {
	bin, err := jobwiretest.Binary()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certs := filepath.Join(dir, "certs")
	if out, err := exec.Command("bash", "../../scripts/dev-certs.sh", certs).CombinedOutput(); err != nil {
		t.Fatalf("dev-certs.sh: %v\n%s", err, out)
	}
	token, auth := makeAuthFile(t, bin, dir)
	srv := jobwiretest.StartServer(t, "--tls-cert", filepath.Join(certs, "server.crt"),
		"--tls-key", filepath.Join(certs, "server.key"), "--auth-file", auth)
	tlsOpt := jobwire.WithTLS(jobwire.TLS{CAFile: filepath.Join(certs, "ca.crt")})
	// srv.Addr is 127.0.0.1, which the dev certificate names.
	c := srv.Client(tlsOpt, jobwire.WithToken(token))
	ctx := context.Background()
	w := newWorker(t, c, jobwire.WorkerOptions{Queues: []string{"secure"}})
	jobwire.HandleRaw(w, "job", func(context.Context, *jobwire.Job[[]byte]) error { return nil })
	runWorker(t, w)
	if _, err := c.Enqueue(ctx, "secure", "job", []byte("x"), jobwire.JobID("s-1")); err != nil {
		t.Fatalf("Enqueue over TLS with the token: %v", err)
	}
	waitState(t, c, "secure", "s-1", pb.JobState_JOB_STATE_COMPLETED, 20*time.Second)

	anonymous := srv.Client(tlsOpt)
	_, err = anonymous.GetJob(ctx, "secure", "s-1")
	if status.Code(err) != codes.Unauthenticated {
		t.Fatalf("GetJob without a token: %v, want UNAUTHENTICATED", err)
	}
	if _, err := jobwire.NewClient("jobs.example.com:50051", jobwire.WithToken(token)); err == nil {
		t.Fatal("NewClient accepted a token in clear text to a non-loopback target")
	}
}

// makeAuthFile makes a token with `jobwire token new` and an auth file in dir that grants
// it every role on every queue.
func makeAuthFile(t *testing.T, bin, dir string) (string, string) {
	t.Helper()
	out, err := exec.Command(bin, "token", "new", "--id", "go-sdk").Output()
	if err != nil {
		t.Fatalf("jobwire token new: %v", err)
	}
	token := strings.TrimSpace(strings.SplitN(string(out), "\n", 2)[0])
	sha := regexp.MustCompile(`sha256: "([0-9a-f]{64})"`).FindStringSubmatch(string(out))
	if !strings.HasPrefix(token, "jw_") || sha == nil {
		t.Fatalf("unexpected output of jobwire token new:\n%s", out)
	}
	auth := filepath.Join(dir, "auth.yaml")
	yaml := "principals:\n  - name: go-sdk\n    tokens:\n      - id: go-sdk\n        sha256: " + sha[1] +
		"\n    grants:\n      - queues: [\"*\"]\n        roles: [producer, worker, admin]\n"
	if err := os.WriteFile(auth, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return token, auth
}

// TestTokenOnLoopbackWithoutTLS: a token may go in clear text to a loopback server.
func TestTokenOnLoopbackWithoutTLS(t *testing.T) {
	bin, err := jobwiretest.Binary()
	if err != nil {
		t.Fatal(err)
	}
	token, auth := makeAuthFile(t, bin, t.TempDir())
	srv := jobwiretest.StartServer(t, "--auth-file", auth)
	ctx := context.Background()
	if _, err := srv.Client(jobwire.WithToken(token)).Enqueue(ctx, "plain", "job", []byte("x")); err != nil {
		t.Fatalf("Enqueue with the token: %v", err)
	}
	if _, err := srv.Client().Enqueue(ctx, "plain", "job", []byte("x")); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("Enqueue without the token: %v, want UNAUTHENTICATED", err)
	}
}

// TestMutualTLS: a client certificate (mTLS) is the principal, named by its URI SAN in the
// auth file (a server with --tls-client-ca); no token is needed.
func TestMutualTLS(t *testing.T) {
	dir := t.TempDir()
	certs := filepath.Join(dir, "certs")
	if out, err := exec.Command("bash", "../../scripts/dev-certs.sh", certs, "go-sdk").CombinedOutput(); err != nil {
		t.Fatalf("dev-certs.sh: %v\n%s", err, out)
	}
	auth := filepath.Join(dir, "auth.yaml")
	yaml := "principals:\n  - name: go-sdk\n    certs: [\"spiffe://jobwire.test/go-sdk\"]\n" +
		"    grants:\n      - queues: [\"*\"]\n        roles: [producer]\n"
	if err := os.WriteFile(auth, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := jobwiretest.StartServer(t, "--tls-cert", filepath.Join(certs, "server.crt"),
		"--tls-key", filepath.Join(certs, "server.key"), "--tls-client-ca", filepath.Join(certs, "ca.crt"),
		"--auth-file", auth)
	ca, err := os.ReadFile(filepath.Join(certs, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	c := srv.Client(jobwire.WithTLS(jobwire.TLS{CAPEM: ca, CertFile: filepath.Join(certs, "client.crt"),
		KeyFile: filepath.Join(certs, "client.key"), ServerName: "localhost"}))
	r, err := c.Enqueue(context.Background(), "mtls", "job", []byte("x"))
	if err != nil || !r.Created {
		t.Fatalf("Enqueue with a client certificate: %v", err)
	}
	noCert := srv.Client(jobwire.WithTLS(jobwire.TLS{CAPEM: ca}))
	if _, err := noCert.Enqueue(context.Background(), "mtls", "job", []byte("x")); err == nil {
		t.Fatal("Enqueue without a client certificate succeeded on an mTLS server")
	}
}
