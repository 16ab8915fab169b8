package jobwire

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/jobwire/jobwire/clients/go/gen/jobwire/v1"
)

// Progress reports and cancels of held jobs, as they travel on the stream.

// pendingReport is a progress report sent on a stream, waiting for its ProgressSaved. The
// server answers a stream's reports in the order they were sent, so the replies are matched
// per lease token, oldest first.
type pendingReport struct {
	sentAt time.Time
	done   chan reportReply // buffered: the reply never blocks the stream's reader
}

// reportReply is the outcome of a report sent on a stream: the server's code and message, or
// unary when the stream ended first (the report is then sent again with ReportProgress).
type reportReply struct {
	code  codes.Code
	msg   string
	unary bool
}

// report saves a handler's progress report: on the stream that leased the job, waiting for
// the ProgressSaved; else (the stream is gone, or it ended before the reply) with the unary
// ReportProgress, retried on UNAVAILABLE.
func (w *Worker) report(ctx context.Context, h *held, r Report) error {
	if r.Progress == nil && r.Message == nil && r.Checkpoint == nil {
		return nil
	}
	req := r.request(h.queue, h.id, h.token)
	w.mu.Lock()
	if _, ok := w.held[h.token]; !ok || h.lost || h.outcome != nil {
		w.mu.Unlock()
		return fmt.Errorf("%w: %s/%s is no longer held by this attempt", ErrLeaseLost, h.queue, h.id)
	}
	if c := w.cur; c != nil && c.gen == h.gen && c.alive() {
		p := &pendingReport{sentAt: time.Now(), done: make(chan reportReply, 1)}
		h.reports = append(h.reports, p)
		c.send(&pb.SubscribeRequest{Message: &pb.SubscribeRequest_Progress{Progress: req}})
		w.mu.Unlock()
		select {
		case rep := <-p.done:
			if !rep.unary {
				return w.reportOutcome(h, rep.code, rep.msg)
			}
		case <-ctx.Done():
			// The reply still comes and is matched to this report, then dropped.
			return context.Cause(ctx)
		}
	} else {
		w.mu.Unlock()
	}
	err := retryUnavailable(ctx, 5, func() error {
		_, e := w.c.Worker.ReportProgress(ctx, req)
		return e
	})
	s := status.Convert(err)
	return w.reportOutcome(h, s.Code(), s.Message())
}

// reportOutcome maps the server's answer to a report: nil, an error wrapping ErrLeaseLost
// (FAILED_PRECONDITION, NOT_FOUND: the handler's context is cancelled with ErrLeaseLost, and
// its result will be refused), or the status error.
func (w *Worker) reportOutcome(h *held, code codes.Code, msg string) error {
	switch code {
	case codes.OK:
		return nil
	case codes.FailedPrecondition, codes.NotFound:
		w.log.Warn("progress refused: the lease is lost; cancelling the handler", "queue", h.queue, "job_id", h.id,
			"code", code.String(), "message", msg)
		h.cancel(ErrLeaseLost)
		return fmt.Errorf("%w: %s", ErrLeaseLost, msg)
	}
	return status.Error(code, msg)
}

// onProgressSaved hands a ProgressSaved to the oldest report of its lease.
func (w *Worker) onProgressSaved(ps *pb.ProgressSaved) {
	w.mu.Lock()
	defer w.mu.Unlock()
	h := w.held[ps.GetLeaseToken()]
	if h == nil || len(h.reports) == 0 {
		w.log.Debug("progress reply for no pending report", "queue", ps.GetQueue(), "job_id", ps.GetJobId())
		return
	}
	p := h.reports[0]
	h.reports = h.reports[1:]
	p.done <- reportReply{code: codes.Code(ps.GetCode()), msg: ps.GetMessage()}
}

// onCancel tells the handler of a cancelled job to stop: its context is cancelled with a
// *CancelledError cause. The worker settles the job when the handler returns (a Fail ends
// it CANCELLED; an ack completes it), as it does any job.
func (w *Worker) onCancel(cl *pb.CancelLease) {
	w.mu.Lock()
	defer w.mu.Unlock()
	h := w.held[cl.GetLeaseToken()]
	if h == nil {
		w.log.Debug("cancel for a lease not held", "queue", cl.GetQueue(), "job_id", cl.GetJobId())
		return
	}
	if h.cancelled != nil {
		return
	}
	h.cancelled = &CancelledError{Reason: cl.GetReason(), RevokeTime: cl.GetRevokeTime().AsTime()}
	if h.outcome != nil {
		w.log.Info("job cancelled after its handler returned: settling it as it is", "queue", h.queue, "job_id", h.id)
		return
	}
	w.log.Info("job cancelled: cancelling its handler", "queue", h.queue, "job_id", h.id,
		"reason", cl.GetReason(), "revoke_in", time.Until(h.cancelled.RevokeTime).Round(time.Millisecond))
	h.cancel(h.cancelled)
}
