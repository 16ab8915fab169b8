package jobwire_test

import (
	"bufio"
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/jobwire/jobwire/clients/go"
	"github.com/jobwire/jobwire/clients/go/jobwiretest"
)

// handled is grpc_server_handled_total of method answered code on the server's /metrics.
func handled(t *testing.T, httpAddr, method, code string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + httpAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	want := []string{`grpc_method="` + method + `"`, `grpc_code="` + code + `"`}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "grpc_server_handled_total{") ||
			!strings.Contains(line, want[0]) || !strings.Contains(line, want[1]) {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndex(line, " ")+1:], 64)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	return 0
}

func unreplicatedEnqueueExistsOnce(t *testing.T, sc scenario) {
	srv := jobwiretest.StartServer(t, sc.Server...)
	c := srv.Client()
	ctx := context.Background()
	const q = "unreplicated"
	_, err := c.Enqueue(ctx, q, "work", []byte("x"))
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("want UNAVAILABLE (NOT_REPLICATED), got %v", err)
	}
	id := jobwire.NotReplicatedJobID(err)
	if id == "" {
		t.Fatalf("the error names no job id: %v", err)
	}
	job, err := c.GetJob(ctx, q, id)
	if err != nil || job.GetJobId() != id {
		t.Fatalf("GetJob(%q): %v %v", id, job, err)
	}
	st, err := c.QueueStats(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	if st.GetWaiting() != 1 || st.GetDelayed() != 0 || st.GetActive() != 0 {
		t.Fatalf("want exactly 1 job, stats %v", st)
	}
	if n := handled(t, srv.HTTPAddr, "Enqueue", "Unavailable"); n <= 1 {
		t.Fatalf("the SDK did not retry with the job id: %v Enqueues answered Unavailable", n)
	}
}

func TestNotReplicatedJobIDIsEmptyForOtherErrors(t *testing.T) {
	for _, err := range []error{nil, context.Canceled, status.Error(codes.Unavailable, "down")} {
		if id := jobwire.NotReplicatedJobID(err); id != "" {
			t.Errorf("%v: %q", err, id)
		}
	}
}
