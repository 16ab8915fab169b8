// Command signup is the 20-sign-up dead-letter experiment on the jobwire Go SDK (the Go
// twin of examples/python/signup_demo.py).
//
// Twenty sign-ups (user_1 .. user_20) each enqueue a "send-welcome-email" job. A fake
// email provider answers "400 invalid address" for good for user_4 and user_9 and "503
// service unavailable" for user_12, user_13 and user_14 until it recovers. The queue allows
// 3 attempts with exponential backoff and jitter (50 ms base). Three runs:
//
//	(a) retry everything: every provider error is retried;
//	(b) permanent errors not retried: a 400 is NonRetryable, a 503 is retried;
//	(c) replay after recovery (not the 400s): continues (b): the provider recovers, then the
//	    dead jobs whose last error was provider_unavailable and that ran out of attempts are
//	    replayed with ReplayDeadLetters and a filter, so the two bad addresses stay dead.
//
// It prints one table row per run and exits 1 when a number differs from the experiment's
// (15/5/30, 15/5/26, 18/2/29), 2 when the run itself failed.
//
//	go run . -server 127.0.0.1:50051
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/jobwire/jobwire/clients/go"
	pb "github.com/jobwire/jobwire/clients/go/gen/jobwire/v1"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

const (
	signups     = 20
	jobName     = "send-welcome-email"
	maxAttempts = 3
	workers     = 2
)

var (
	badAddresses = map[string]bool{"user_4": true, "user_9": true}
	outage       = map[string]bool{"user_12": true, "user_13": true, "user_14": true}
)

const (
	retryAll   = "retry everything"
	classified = "permanent errors not retried"
	replayed   = "replay after recovery (not the 400s)"
)

var expected = map[string][3]int{retryAll: {15, 5, 30}, classified: {15, 5, 26}, replayed: {18, 2, 29}}

// Signup is a job's payload.
type Signup struct {
	UserID string `json:"user_id"`
	Email  string `json:"email"`
}

type row struct {
	strategy                string
	emailed, dead, requests int
}

func main() {
	server := flag.String("server", "127.0.0.1:50051", "jobwire gRPC address HOST:PORT")
	timeout := flag.Duration("timeout", 60*time.Second, "how long each run may take to settle")
	credits := flag.Int("credits", 4, "concurrency (credits) of each of the two workers")
	ca := flag.String("ca", "", "TLS: PEM file of the CA that signed the server's certificate")
	cert := flag.String("cert", "", "mTLS: the client certificate (PEM); needs -key")
	key := flag.String("key", "", "mTLS: the client certificate's private key (PEM)")
	serverName := flag.String("server-name", "", "TLS: the name the server's certificate must have")
	tokenFile := flag.String("token-file", "", "a file with the bearer token of every call")
	flag.Parse()

	var opts []jobwire.Option
	if *ca != "" || *cert != "" {
		opts = append(opts, jobwire.WithTLS(jobwire.TLS{CAFile: *ca, CertFile: *cert, KeyFile: *key, ServerName: *serverName}))
	}
	if *tokenFile != "" {
		b, err := os.ReadFile(*tokenFile)
		if err != nil {
			fail(2, "read the token: %v", err)
		}
		opts = append(opts, jobwire.WithToken(strings.TrimSpace(string(b))))
	}
	// Warnings and errors only: the retries are the point of the demo, not news.
	opts = append(opts, jobwire.WithLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))))
	client, err := jobwire.NewClient(*server, opts...)
	if err != nil {
		fail(2, "%v", err)
	}
	defer client.Close()
	if err := waitServing(client, 30*time.Second); err != nil {
		fail(2, "cannot reach jobwire at %s: %v", *server, err)
	}
	d := &demo{c: client, timeout: *timeout, credits: *credits}
	rows, problems, err := d.run(context.Background())
	if err != nil {
		fail(2, "%v", err)
	}
	fmt.Println()
	fmt.Println("| strategy | emailed | dead-lettered | provider requests |")
	fmt.Println("|---|---|---|---|")
	for _, r := range rows {
		fmt.Printf("| %s | %d | %d | %d |\n", r.strategy, r.emailed, r.dead, r.requests)
	}
	fmt.Println()
	for _, r := range rows {
		want := expected[r.strategy]
		if [3]int{r.emailed, r.dead, r.requests} != want {
			problems = append(problems, fmt.Sprintf("%s: got %d/%d/%d, expected %d/%d/%d (emailed/dead-lettered/provider requests)",
				r.strategy, r.emailed, r.dead, r.requests, want[0], want[1], want[2]))
		}
	}
	if len(problems) > 0 {
		for _, p := range problems {
			fmt.Fprintln(os.Stderr, "MISMATCH", p)
		}
		os.Exit(1)
	}
	fmt.Println("all three rows match the experiment (15/5/30, 15/5/26, 18/2/29)")
}

func fail(code int, format string, args ...any) {
	fmt.Fprintf(os.Stderr, "error: "+format+"\n", args...)
	os.Exit(code)
}

type demo struct {
	c       *jobwire.Client
	timeout time.Duration
	credits int
}

func (d *demo) run(ctx context.Context) ([]row, []string, error) {
	var rows []row
	// (a) retry everything
	a := newRun("retry-all")
	if err := d.enqueue(ctx, a); err != nil {
		return nil, nil, err
	}
	if err := d.work(ctx, a, false, "a"); err != nil {
		return nil, nil, err
	}
	r, err := d.row(ctx, a, retryAll)
	if err != nil {
		return nil, nil, err
	}
	rows = append(rows, r)
	a.checkKeys("a")

	// (b) permanent errors not retried
	b := newRun("classified")
	if err := d.enqueue(ctx, b); err != nil {
		return nil, nil, err
	}
	if err := d.work(ctx, b, true, "b"); err != nil {
		return nil, nil, err
	}
	if r, err = d.row(ctx, b, classified); err != nil {
		return nil, nil, err
	}
	rows = append(rows, r)
	dead, err := d.c.ListDeadLetters(ctx, b.queue, nil)
	if err != nil {
		return nil, nil, err
	}
	for _, j := range dead {
		want := pb.DeadReason_DEAD_REASON_ATTEMPTS_EXHAUSTED
		if badAddresses[b.jobs[j.GetJobId()]] {
			want = pb.DeadReason_DEAD_REASON_NO_RETRY
		}
		if j.GetDeadReason() != want {
			b.problem("%s: %q dead with %v, expected %v", classified, j.GetJobId(), j.GetDeadReason(), want)
		}
	}

	// (c) replay after recovery, not the 400s: same queue and provider as (b)
	b.provider.recover()
	resp, err := d.c.ReplayDeadLetters(ctx, b.queue, nil, &pb.DeadLetterFilter{
		Reason: pb.DeadReason_DEAD_REASON_ATTEMPTS_EXHAUSTED, ErrorType: "provider_unavailable",
	})
	if err != nil {
		return nil, nil, err
	}
	got := slices.Sorted(slices.Values(resp.GetReplayedJobIds()))
	var want []string
	for id, u := range b.jobs {
		if outage[u] {
			want = append(want, id)
		}
	}
	slices.Sort(want)
	fmt.Printf("replay [%s] filter reason=ATTEMPTS_EXHAUSTED error_type=provider_unavailable: replayed %v\n", replayed, got)
	if !slices.Equal(got, want) {
		b.problem("%s: replayed %v, expected %v", replayed, got, want)
	}
	if err := d.work(ctx, b, true, "c"); err != nil {
		return nil, nil, err
	}
	if r, err = d.row(ctx, b, replayed); err != nil {
		return nil, nil, err
	}
	rows = append(rows, r)
	b.checkKeys("b+c")
	for _, id := range want {
		j, err := d.c.GetJob(ctx, b.queue, id)
		if err != nil {
			return nil, nil, err
		}
		if j.GetReplays() != 1 {
			b.problem("%s: %q has replays=%d, expected 1", replayed, id, j.GetReplays())
		}
	}
	return rows, append(a.problems, b.problems...), nil
}

// waitServing polls the gRPC health service until it says SERVING.
func waitServing(c *jobwire.Client, d time.Duration) error {
	h := healthpb.NewHealthClient(c.Conn())
	deadline := time.Now().Add(d)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		r, err := h.Check(ctx, &healthpb.HealthCheckRequest{})
		cancel()
		if err == nil && r.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			return nil
		}
		if time.Now().After(deadline) {
			if err == nil {
				err = fmt.Errorf("health says %v", r.GetStatus())
			}
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func randomHex() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
