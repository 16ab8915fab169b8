package jobwire_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/jobwire/jobwire/clients/go"
	pb "github.com/jobwire/jobwire/clients/go/gen/jobwire/v1"
	"github.com/jobwire/jobwire/clients/go/jobwiretest"
)

// TestKeepaliveFindsAFrozenServer: a Subscribe stream through a proxy that freezes (nothing
// forwarded, no reset, like a SIGSTOPped server) fails UNAVAILABLE once a keepalive PING goes
// unanswered: no sooner than Interval + Timeout (so the option reaches the connection: the
// default's 5 s timeout would end it sooner) and long before anything else would notice.
func TestKeepaliveFindsAFrozenServer(t *testing.T) {
	srv := jobwiretest.StartServer(t)
	p := startProxy(t, srv.Addr)
	k := jobwire.Keepalive{Interval: 10 * time.Second, Timeout: 12 * time.Second}
	c, err := jobwire.NewClient(p.addr(), jobwire.WithKeepalive(k))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	stream, err := c.Worker.Subscribe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	open := &pb.SubscribeRequest{Message: &pb.SubscribeRequest_Open{Open: &pb.OpenStream{Queues: []string{"ka"}, Credits: 1}}}
	if err := stream.Send(open); err != nil {
		t.Fatal(err)
	}
	// The open is through once the server answers a unary call on the same connection.
	if _, err := c.Worker.ExtendLease(ctx, &pb.ExtendLeaseRequest{Queue: "ka", JobId: "none", LeaseToken: "none"}); status.Code(err) != codes.NotFound {
		t.Fatalf("ExtendLease of no job: %v, want NOT_FOUND", err)
	}
	p.freeze()
	frozen := time.Now()
	_, err = stream.Recv()
	took := time.Since(frozen)
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("the stream ended with %v, want UNAVAILABLE", err)
	}
	if took < 20*time.Second || took > 60*time.Second {
		t.Fatalf("the frozen stream failed after %s; want Interval + Timeout (22 s), at least 20 s", took)
	}
	t.Logf("the frozen stream failed after %s", took.Round(time.Millisecond))
}

// TestKeepaliveBelowTheFloorIsRefused: grpc-go pings at most every 10 s; NewClient says so.
func TestKeepaliveBelowTheFloorIsRefused(t *testing.T) {
	for _, k := range []jobwire.Keepalive{{Interval: time.Second, Timeout: time.Second}, {Interval: 10 * time.Second}} {
		if _, err := jobwire.NewClient("127.0.0.1:1", jobwire.WithKeepalive(k)); err == nil {
			t.Errorf("NewClient with %+v: no error", k)
		}
	}
}
