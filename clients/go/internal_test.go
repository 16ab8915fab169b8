package jobwire

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/jobwire/jobwire/clients/go/gen/jobwire/v1"
)

func TestBackoffIsFullJitterWithinBounds(t *testing.T) {
	b := backoff{base: 500 * time.Millisecond, max: 30 * time.Second}
	ceil := 500 * time.Millisecond
	for i := 0; i < 12; i++ {
		d := b.next()
		if d < 0 || d > ceil {
			t.Fatalf("wait %d: %s, want within [0, %s]", i, d, ceil)
		}
		ceil = min(2*ceil, 30*time.Second)
	}
	b.reset()
	if d := b.next(); d > 500*time.Millisecond {
		t.Fatalf("after reset: %s, want at most 500ms", d)
	}
	// Full jitter spreads: 200 draws from [0, 30 s] are not all in one half.
	var low int
	for i := 0; i < 200; i++ {
		if b.next() < 15*time.Second {
			low++
		}
	}
	if low == 0 || low == 200 {
		t.Fatalf("%d of 200 capped waits below half the cap: not spread", low)
	}
}

func TestTruncateKeepsUTF8AndSaysHowMuch(t *testing.T) {
	s := strings.Repeat("é", 5000) // 10000 bytes
	got := truncate(s, 8<<10)
	if len(got) > 8<<10 || !utf8.ValidString(got) || !strings.Contains(got, "…[truncated ") {
		t.Fatalf("len %d, valid %v, tail %q", len(got), utf8.ValidString(got), got[len(got)-30:])
	}
	if truncate("short", 10) != "short" {
		t.Fatal("a short string changed")
	}
}

func TestIsLoopback(t *testing.T) {
	for target, want := range map[string]bool{
		"127.0.0.1:50051": true, "localhost:1": true, "[::1]:50051": true,
		"10.0.0.1:50051": false, "jobs.example.com:443": false, "dns:///x:1": false,
	} {
		if got := isLoopback(target); got != want {
			t.Errorf("isLoopback(%q) = %v, want %v", target, got, want)
		}
	}
}

func TestRetryUnavailableOnlyRetriesUnavailable(t *testing.T) {
	ctx := context.Background()
	calls := 0
	err := retryUnavailable(ctx, 5, func() error {
		calls++
		if calls < 3 {
			return status.Error(codes.Unavailable, "down")
		}
		return nil
	})
	if err != nil || calls != 3 {
		t.Fatalf("err %v after %d calls, want success on the 3rd", err, calls)
	}
	calls = 0
	err = retryUnavailable(ctx, 5, func() error { calls++; return status.Error(codes.InvalidArgument, "bad") })
	if status.Code(err) != codes.InvalidArgument || calls != 1 {
		t.Fatalf("INVALID_ARGUMENT: %v after %d calls, want 1 call", err, calls)
	}
	calls = 0
	err = retryUnavailable(ctx, 1, func() error { calls++; return status.Error(codes.Unavailable, "down") })
	if status.Code(err) != codes.Unavailable || calls != 1 {
		t.Fatalf("one try: %v after %d calls", err, calls)
	}
}

func TestOutcomeOfRateLimitedGroupAndCancel(t *testing.T) {
	o := outcomeOf(RateLimitedGroup(2*time.Second), nil)
	if o.Disposition != pb.FailDisposition_FAIL_DISPOSITION_RATE_LIMITED || !o.PauseGroup || o.PauseQueue || o.RetryAfter != 2*time.Second {
		t.Fatalf("RateLimitedGroup: %+v", o)
	}
	f := failRequest(&held{outcome: &o})
	if !f.GetPauseGroup() || f.GetPauseQueue() || f.GetRetryAfter().AsDuration() != 2*time.Second {
		t.Fatalf("fail request: %v", f)
	}
	o = outcomeOf(fmt.Errorf("stopping: %w", &CancelledError{Reason: "customer left"}), nil)
	if o.Disposition != pb.FailDisposition_FAIL_DISPOSITION_NO_RETRY || o.Error.GetErrorType() != "cancelled" ||
		!strings.Contains(o.Error.GetMessage(), "customer left") {
		t.Fatalf("a cancelled handler's error: %+v", o)
	}
}
