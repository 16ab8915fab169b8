package jobwire

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/jobwire/jobwire/clients/go/gen/jobwire/v1"
)

// held is one lease the worker holds, from its arrival until its result is settled (or
// known lost). While the stream that leased it (gen) lives, the server renews it; after
// that stream ends it is an orphan, renewed by keepOrphans with ExtendLease and settled with
// the unary Ack/Fail.
//
// Credits: the server returns a stream's credit when a lease of that stream is settled on
// it. An orphan's slot is granted to the current stream (GrantCredits 1) when the orphan is
// settled, so free server credits plus held leases never exceed Concurrency.
type held struct {
	lease            *pb.Lease
	queue, id, token string
	gen              uint64 // the stream that leased it
	cancel           context.CancelCauseFunc
	outcome          *Outcome  // set when the handler returned (or at the shutdown deadline)
	sentOn           uint64    // the stream the settle was sent on, 0: none or unary
	sentAt           time.Time // when it was sent on that stream
	unary            bool      // a unary settle is under way
	creditBack       bool      // the server already returned this lease's credit
	lost             bool      // the lease is gone: its result is dropped (logged)
	abandoned        bool      // failed at the shutdown deadline: the handler's return is ignored
	nextExtend       time.Time // orphans: when to call ExtendLease next
	extending        bool
	cancelled        *CancelledError  // the job was cancelled (CancelLease): its handler was told
	reports          []*pendingReport // progress sent on stream gen, oldest first, awaiting ProgressSaved
}

// onLease starts the handler of a lease that arrived on stream s.
func (w *Worker) onLease(s *stream, l *pb.Lease) {
	j := l.GetJob()
	h := &held{lease: l, queue: j.GetQueue(), id: j.GetJobId(), token: l.GetLeaseToken(), gen: s.gen}
	ctx, cancel := context.WithCancelCause(w.runCtx)
	h.cancel = cancel
	att := &attempt{report: func(ctx context.Context, r Report) error { return w.report(ctx, h, r) }}
	w.mu.Lock()
	if d := time.Until(l.GetLeaseDeadline().AsTime()); d > 0 {
		w.leaseDur = d
	}
	// A lease may overtake the Settled reply of the ack that freed its credit, so count the
	// handlers still running, not the leases awaiting a reply.
	running := 0
	for _, o := range w.held {
		if o.outcome == nil {
			running++
		}
	}
	if running >= w.opts.Concurrency {
		w.log.Error("the server sent a lease beyond the credits granted", "queue", h.queue, "job_id", h.id, "running", running)
	}
	w.held[h.token] = h
	w.notifyLocked()
	w.mu.Unlock()
	w.log.Debug("lease", "queue", h.queue, "job_id", h.id, "name", j.GetName(), "attempt", l.GetAttempt())
	handler := w.handlers[j.GetName()]
	go func() {
		var o Outcome
		if handler == nil {
			o = noHandlerOutcome(j.GetName(), w.opts.WorkerID)
			w.log.Error("no handler for the job's name: failing the attempt", "queue", h.queue, "job_id", h.id, "name", j.GetName())
		} else {
			o = callHandler(ctx, handler, l, att)
		}
		cancel(nil)
		w.finish(h, o)
	}()
}

// finish records a handler's outcome and settles it.
func (w *Worker) finish(h *held, o Outcome) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if h.abandoned {
		w.log.Info("handler returned after the shutdown deadline; its job was already failed", "queue", h.queue, "job_id", h.id)
		return
	}
	if !o.Ack {
		w.log.Info("attempt failed", "queue", h.queue, "job_id", h.id, "attempt", h.lease.GetAttempt(),
			"disposition", o.Disposition.String(), "error", o.Err)
	}
	if h.lost {
		w.log.Warn("lease lost while the handler ran: result dropped; the job is delivered again",
			"queue", h.queue, "job_id", h.id, "ack", o.Ack)
		w.releaseLocked(h)
		return
	}
	if h.cancelled != nil && !o.Ack && errors.Is(o.Err, context.Canceled) {
		// The handler returned ctx.Err() after the cancel: record it as the cancel it is.
		o = outcomeOf(h.cancelled, nil)
	}
	h.outcome = &o
	w.settleLocked(h)
}

// settleLocked sends h's outcome on the stream that holds the lease, or unary when that
// stream is gone. Caller holds mu.
func (w *Worker) settleLocked(h *held) {
	if c := w.cur; c != nil && c.gen == h.gen && !h.creditBack && c.alive() {
		h.sentOn, h.sentAt = c.gen, time.Now()
		c.send(settleRequest(h))
		return
	}
	if !h.unary {
		h.unary = true
		go w.settleUnary(h)
	}
}

// releaseLocked forgets h (settled or lost) and frees its slot: an orphan's credit is
// granted to the current stream. Caller holds mu.
func (w *Worker) releaseLocked(h *held) {
	if _, ok := w.held[h.token]; !ok {
		return
	}
	delete(w.held, h.token)
	if c := w.cur; c != nil && c.gen != h.gen && !h.creditBack && !w.stopping && c.alive() && !c.serverDraining {
		c.send(&pb.SubscribeRequest{Message: &pb.SubscribeRequest_GrantCredits{GrantCredits: &pb.GrantCredits{Credits: 1}}})
	}
	w.notifyLocked()
}

// onSettled handles a Settled reply on stream s.
func (w *Worker) onSettled(s *stream, st *pb.Settled) {
	w.mu.Lock()
	defer w.mu.Unlock()
	h := w.held[st.GetLeaseToken()]
	if h == nil || h.sentOn != s.gen {
		w.log.Debug("settled reply for no pending settle", "queue", st.GetQueue(), "job_id", st.GetJobId())
		return
	}
	switch code := codes.Code(st.GetCode()); code {
	case codes.OK:
		w.releaseLocked(h)
	case codes.FailedPrecondition, codes.NotFound:
		w.log.Warn("settle refused: the lease is lost (expired and given to another worker, or the job deleted); result dropped",
			"queue", h.queue, "job_id", h.id, "code", code.String(), "message", st.GetMessage())
		w.releaseLocked(h)
	default:
		// The server gave the credit back already; settle again by the unary call, which
		// retries UNAVAILABLE and logs anything else.
		w.log.Warn("settle refused on the stream; retrying with a unary call",
			"queue", h.queue, "job_id", h.id, "code", code.String(), "message", st.GetMessage())
		if code == codes.ResourceExhausted {
			w.resultRefusedLocked(h, st.GetMessage())
		}
		h.creditBack, h.sentOn = true, 0
		w.settleLocked(h)
	}
}

// resultRefusedLocked turns an ack whose result the server refused as too large into a
// NO_RETRY Fail (error type "result_too_large"): the job stays leased until settled, and
// running it again would make the same result. Caller holds mu.
func (w *Worker) resultRefusedLocked(h *held, why string) bool {
	if !h.outcome.Ack || len(h.outcome.Result) == 0 {
		return false
	}
	w.log.Error("the server refused the job's result as too large: failing the job NO_RETRY",
		"queue", h.queue, "job_id", h.id, "result_bytes", len(h.outcome.Result), "message", why)
	o := outcomeOf(NonRetryable(fmt.Errorf("result of %d bytes refused: %s", len(h.outcome.Result), why)), nil)
	o.Error.ErrorType = "result_too_large"
	h.outcome = &o
	return true
}

// onStreamEnd turns the leases of stream s into orphans: renewed with ExtendLease at once,
// and the settles sent on s that got no reply are sent again by unary calls.
func (w *Worker) onStreamEnd(s *stream) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cur == s {
		w.cur = nil
	}
	now := time.Now()
	for _, h := range w.held {
		if h.gen != s.gen {
			continue
		}
		h.nextExtend = now
		for _, p := range h.reports {
			p.done <- reportReply{unary: true}
		}
		h.reports = nil
		if h.sentOn == s.gen {
			h.sentOn = 0
			w.settleLocked(h)
		}
	}
	w.notifyLocked()
}

func settleRequest(h *held) *pb.SubscribeRequest {
	if h.outcome.Ack {
		return &pb.SubscribeRequest{Message: &pb.SubscribeRequest_Ack{Ack: ackRequest(h)}}
	}
	return &pb.SubscribeRequest{Message: &pb.SubscribeRequest_Fail{Fail: failRequest(h)}}
}

func ackRequest(h *held) *pb.AckRequest {
	return &pb.AckRequest{Queue: h.queue, JobId: h.id, LeaseToken: h.token, Result: h.outcome.Result}
}

func failRequest(h *held) *pb.FailRequest {
	o := h.outcome
	f := &pb.FailRequest{Queue: h.queue, JobId: h.id, LeaseToken: h.token, Disposition: o.Disposition,
		Error: o.Error, PauseQueue: o.PauseQueue, PauseGroup: o.PauseGroup}
	if o.RetryAfter > 0 {
		f.RetryAfter = durationpb.New(o.RetryAfter)
	}
	return f
}

// settleUnary acks or fails h with the unary calls: UNAVAILABLE (and a deadline or a
// cancelled connection) is retried with full-jitter backoff until Run has returned;
// FAILED_PRECONDITION or NOT_FOUND means the lease is lost (logged, result dropped);
// anything else is logged.
func (w *Worker) settleUnary(h *held) {
	b := backoff{base: w.opts.ReconnectMin, max: 5 * time.Second}
	for attempt := 1; ; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		var err error
		if h.outcome.Ack {
			_, err = w.c.Worker.Ack(ctx, ackRequest(h))
		} else {
			_, err = w.c.Worker.Fail(ctx, failRequest(h))
		}
		cancel()
		code := status.Code(err)
		switch code {
		case codes.OK:
			w.log.Debug("settled with a unary call", "queue", h.queue, "job_id", h.id, "ack", h.outcome.Ack)
		case codes.FailedPrecondition, codes.NotFound:
			w.log.Warn("settle refused: the lease is lost (expired and given to another worker, or the job deleted); result dropped",
				"queue", h.queue, "job_id", h.id, "code", code.String(), "error", err)
		case codes.ResourceExhausted:
			w.mu.Lock()
			retry := w.resultRefusedLocked(h, status.Convert(err).Message())
			w.mu.Unlock()
			if retry {
				continue
			}
			w.log.Error("settle refused; result dropped", "queue", h.queue, "job_id", h.id, "code", code.String(), "error", err)
		case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled, codes.Internal:
			w.log.Info("settle failed; retrying", "queue", h.queue, "job_id", h.id, "code", code.String(), "attempt", attempt)
			select {
			case <-time.After(b.next()):
				continue
			case <-w.stopped:
				w.log.Error("worker stopped before the result was settled; the lease will expire and the job is delivered again",
					"queue", h.queue, "job_id", h.id, "ack", h.outcome.Ack)
			}
		default:
			w.log.Error("settle refused; result dropped", "queue", h.queue, "job_id", h.id, "code", code.String(), "error", err)
		}
		w.mu.Lock()
		h.unary = false
		w.releaseLocked(h)
		w.mu.Unlock()
		return
	}
}

// keepOrphans renews, with ExtendLease by lease token, every lease whose stream ended, at a
// third of its remaining time (at once after a reconnect), until it is settled. A refused
// renewal (FAILED_PRECONDITION, NOT_FOUND) means the lease is lost: the handler's context is
// cancelled with ErrLeaseLost and its result will be dropped.
func (w *Worker) keepOrphans(ctx context.Context) {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		w.mu.Lock()
		for _, h := range w.held {
			orphan := w.cur == nil || w.cur.gen != h.gen
			if !orphan || h.extending || h.lost || h.abandoned || now.Before(h.nextExtend) {
				continue
			}
			if h.outcome != nil && h.sentOn == 0 && !h.unary {
				continue
			}
			h.extending = true
			go w.extend(h)
		}
		w.mu.Unlock()
	}
}

func (w *Worker) extend(h *held) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	resp, err := w.c.Worker.ExtendLease(ctx, &pb.ExtendLeaseRequest{Queue: h.queue, JobId: h.id, LeaseToken: h.token})
	cancel()
	w.mu.Lock()
	defer w.mu.Unlock()
	h.extending = false
	switch code := status.Code(err); code {
	case codes.OK:
		left := time.Until(resp.GetLeaseDeadline().AsTime())
		h.nextExtend = time.Now().Add(max(left/3, 100*time.Millisecond))
		w.log.Info("lease renewed with ExtendLease", "queue", h.queue, "job_id", h.id, "deadline_in", left.Round(time.Millisecond))
	case codes.FailedPrecondition, codes.NotFound:
		if _, still := w.held[h.token]; still && !h.lost {
			w.log.Warn("lease lost: ExtendLease refused; cancelling the handler", "queue", h.queue, "job_id", h.id, "error", err)
			h.lost = true
			h.cancel(ErrLeaseLost)
		}
	default:
		// Soon again: the lease may have little time left (the server may be back any moment).
		h.nextExtend = time.Now().Add(200 * time.Millisecond)
		w.log.Info("ExtendLease failed; retrying", "queue", h.queue, "job_id", h.id, "code", code.String())
	}
}

// abandonHeld ends the grace: every handler still running is cancelled (ErrShutdown) and
// its job handed back uncharged (a Fail with RELEASE, error type "worker_shutdown", as every
// jobwire SDK does: clients/conformance/README.md): waiting again at once with its attempt
// not counted, as the server's own drain does, so a deploy never dead-letters work.
func (w *Worker) abandonHeld() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, h := range w.held {
		if h.outcome != nil || h.lost {
			if h.lost {
				w.releaseLocked(h)
			}
			continue
		}
		h.abandoned = true
		h.cancel(ErrShutdown)
		o := outcomeOf(ErrShutdown, nil)
		o.Disposition, o.RetryAfter = pb.FailDisposition_FAIL_DISPOSITION_RELEASE, 0
		o.Error.ErrorType = "worker_shutdown"
		h.outcome = &o
		w.log.Warn("shutdown grace over: handler cancelled, job handed back uncharged", "queue", h.queue, "job_id", h.id)
		w.settleLocked(h)
	}
}
