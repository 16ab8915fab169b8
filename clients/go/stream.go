package jobwire

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/jobwire/jobwire/clients/go/gen/jobwire/v1"
)

// stream is one Subscribe stream. Its messages go out through one sender goroutine (a gRPC
// stream allows one sender at a time), from an unbounded outbox, so the worker's lock is
// never held across a network write.
type stream struct {
	gen    uint64
	call   grpc.BidiStreamingClient[pb.SubscribeRequest, pb.SubscribeResponse]
	cancel context.CancelFunc

	mu             sync.Mutex
	out            []*pb.SubscribeRequest
	oldest         time.Time // when the oldest unsent message was queued
	wake           chan struct{}
	ended          chan struct{} // closed when the stream is over: the sender returns
	closing        bool          // CloseSend after the outbox
	dead           bool
	serverDraining bool // the server sent Draining: no more leases, no grants
	lastSend       time.Time
}

func (s *stream) send(m *pb.SubscribeRequest) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dead || s.closing {
		return
	}
	if len(s.out) == 0 {
		s.oldest = time.Now()
	}
	s.out = append(s.out, m)
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *stream) closeSend() {
	s.mu.Lock()
	s.closing = true
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *stream) alive() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.dead && !s.closing
}

// sender writes the outbox to the stream until it fails or is closed.
func (s *stream) sender() {
	for {
		s.mu.Lock()
		batch, closing := s.out, s.closing
		s.out = nil
		s.mu.Unlock()
		for _, m := range batch {
			if err := s.call.Send(m); err != nil {
				s.cancel() // Recv reports the stream's real error
				return
			}
		}
		s.mu.Lock()
		s.lastSend = time.Now()
		if len(s.out) == 0 {
			s.oldest = time.Time{}
		}
		s.mu.Unlock()
		if closing && len(batch) == 0 {
			_ = s.call.CloseSend()
			return
		}
		if len(batch) == 0 {
			select {
			case <-s.wake:
			case <-s.ended:
				return
			}
		}
	}
}

// stalled says why the stream makes no progress, or "".
func (s *stream) stalled(limit time.Duration) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.oldest.IsZero() && time.Since(s.oldest) > limit {
		return "a message waited too long to be sent"
	}
	return ""
}

// connectLoop keeps one stream open while the worker runs: it opens a stream when a slot is
// free, runs it until it ends, and reconnects with full-jitter backoff.
func (w *Worker) connectLoop(stop context.Context) {
	b := backoff{base: w.opts.ReconnectMin, max: w.opts.ReconnectMax}
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			if stop.Err() != nil {
				return
			}
			d := b.next()
			w.log.Info("reconnecting", "in", d.Round(time.Millisecond))
			if !sleepCtx(stop, d) {
				return
			}
		}
		if !w.waitFreeSlot(stop) {
			return
		}
		opened, err := w.runStream()
		if opened {
			b.reset()
		}
		if err == nil {
			continue
		}
		switch status.Code(err) {
		case codes.InvalidArgument, codes.Unauthenticated, codes.PermissionDenied:
			w.log.Error("the server refused the stream; not reconnecting", "error", err)
			w.failFatal(err)
			w.mu.Lock()
			stopping := w.stopping
			w.mu.Unlock()
			if !stopping {
				// Run returns the error: shut down as if asked to.
				go w.selfStop()
			}
			return
		}
		w.log.Warn("stream ended", "error", err)
	}
}

// waitFreeSlot waits until a slot is free (a stream opens with at least one credit) or the
// worker stops; false when it stops.
func (w *Worker) waitFreeSlot(stop context.Context) bool {
	for {
		w.mu.Lock()
		if w.stopping || stop.Err() != nil {
			w.mu.Unlock()
			return false
		}
		if w.freeLocked() > 0 {
			w.mu.Unlock()
			return true
		}
		ch := w.waitChangeLocked()
		w.mu.Unlock()
		select {
		case <-ch:
		case <-stop.Done():
			return false
		}
	}
}

// runStream opens a Subscribe stream with the free slots as credits and serves it until it
// ends. opened: the server accepted the open.
func (w *Worker) runStream() (opened bool, err error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	call, err := w.c.Worker.Subscribe(ctx)
	if err != nil {
		return false, err
	}
	s := &stream{call: call, cancel: cancel, wake: make(chan struct{}, 1), ended: make(chan struct{})}
	w.mu.Lock()
	if w.stopping {
		w.mu.Unlock()
		return false, nil
	}
	w.gen++
	s.gen = w.gen
	credits := w.freeLocked()
	s.send(&pb.SubscribeRequest{Message: &pb.SubscribeRequest_Open{Open: &pb.OpenStream{
		Queues: w.opts.Queues, Credits: uint32(credits), WorkerId: w.opts.WorkerID,
	}}})
	w.cur = s
	w.notifyLocked()
	w.mu.Unlock()
	go s.sender()
	defer func() {
		s.mu.Lock()
		s.dead = true
		s.mu.Unlock()
		close(s.ended)
		cancel()
		w.onStreamEnd(s)
	}()
	hbDone := make(chan struct{})
	defer close(hbDone)
	go w.heartbeat(s, hbDone)

	md, err := call.Header()
	if err != nil {
		return false, err
	}
	// A refusal comes as a trailers-only response: no headers, and Recv returns the status.
	// Only a stream with response headers counts as open (and resets the backoff).
	opened = len(md) > 0
	if opened {
		w.log.Info("stream open", "queues", w.opts.Queues, "credits", credits, "stream", s.gen)
	}
	for {
		m, err := call.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				w.log.Info("stream closed", "stream", s.gen)
				return opened, nil
			}
			if status.Code(err) == codes.Canceled && ctx.Err() != nil {
				return opened, nil
			}
			return opened, err
		}
		switch msg := m.GetMessage().(type) {
		case *pb.SubscribeResponse_Lease:
			w.onLease(s, msg.Lease)
		case *pb.SubscribeResponse_Settled:
			w.onSettled(s, msg.Settled)
		case *pb.SubscribeResponse_Cancel:
			w.onCancel(msg.Cancel)
		case *pb.SubscribeResponse_ProgressSaved:
			w.onProgressSaved(msg.ProgressSaved)
		case *pb.SubscribeResponse_Draining:
			w.log.Info("the server is draining: finishing held jobs, then reconnecting",
				"grace", msg.Draining.GetGrace().AsDuration())
			s.mu.Lock()
			s.serverDraining = true
			s.mu.Unlock()
		}
	}
}

// heartbeat sends a Heartbeat when nothing else went out for an interval, and is the stall
// watchdog: a stream whose outbox, or whose settles, do not move within StallTimeout is
// cancelled, and connectLoop opens a new one (the lesson of Hatchet's zombie workers: a
// heartbeat that outlives a stalled stream hides it).
func (w *Worker) heartbeat(s *stream, done <-chan struct{}) {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
		}
		if why := s.stalled(w.opts.StallTimeout); why != "" || w.settleStalled(s) {
			if why == "" {
				why = "a settle got no reply"
			}
			w.log.Warn("stream stalled: replacing it", "why", why, "stream", s.gen)
			s.cancel()
			return
		}
		iv := w.heartbeatInterval() // takes w.mu: before s.mu (lock order w.mu, then s.mu)
		s.mu.Lock()
		idle := time.Since(s.lastSend) >= iv && len(s.out) == 0 && !s.lastSend.IsZero()
		s.mu.Unlock()
		if idle {
			s.send(&pb.SubscribeRequest{Message: &pb.SubscribeRequest_Heartbeat{Heartbeat: &pb.Heartbeat{}}})
		}
	}
}

// settleStalled says whether a settle or a progress report sent on s waits for its reply
// longer than StallTimeout.
func (w *Worker) settleStalled(s *stream) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, h := range w.held {
		if h.sentOn == s.gen && time.Since(h.sentAt) > w.opts.StallTimeout {
			return true
		}
		if h.gen == s.gen && len(h.reports) > 0 && time.Since(h.reports[0].sentAt) > w.opts.StallTimeout {
			return true
		}
	}
	return false
}

// selfStop is the shutdown after a fatal refusal: nothing to drain on the server's side.
func (w *Worker) selfStop() {
	w.mu.Lock()
	w.stopping = true
	w.notifyLocked()
	w.mu.Unlock()
}
