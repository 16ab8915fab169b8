package jobwire

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	pb "github.com/jobwire/jobwire/clients/go/gen/jobwire/v1"
)

// WorkerOptions configures [NewWorker]. Queues is required; every other field has a default.
type WorkerOptions struct {
	// Queues to lease from (1 to 32).
	Queues []string
	// Handlers that may run at once, and so the most leases held at once (credits, like
	// Pub/Sub flow control). Default 1.
	Concurrency int
	// Names the worker in the server's logs and in each failed attempt's record; kept
	// across reconnects. Default "<hostname>-<pid>".
	WorkerID string
	// How long a graceful shutdown waits for held jobs before cancelling their handlers'
	// contexts and failing them with RETRY. Default 25 s; must not be negative (0: default).
	ShutdownGrace time.Duration
	// Leave SIGTERM and SIGINT alone (shut down only when Run's context ends). By default
	// Run shuts down gracefully on the first signal and skips the rest of the grace on the
	// second.
	DisableSignalHandling bool
	// The most time between two messages on the stream (heartbeats while idle). Default:
	// 2 s, or a third of the lease duration when that is shorter. Keep it well below the
	// server's --heartbeat-timeout (default 10 s).
	HeartbeatInterval time.Duration
	// A stream whose sends, or whose settle replies, make no progress for this long is
	// replaced (the stall watchdog). Default 15 s.
	StallTimeout time.Duration
	// Bounds of the full-jitter reconnect backoff. Defaults 500 ms and 30 s.
	ReconnectMin, ReconnectMax time.Duration
	// Logger; default the client's.
	Logger *slog.Logger
}

// Worker leases jobs from one Subscribe stream at a time and runs the handler registered
// for each job's name. Build it with [NewWorker], register handlers with [Handle] or
// [HandleRaw], then call [Worker.Run].
type Worker struct {
	c        *Client
	opts     WorkerOptions
	log      *slog.Logger
	handlers map[string]rawHandler

	mu       sync.Mutex
	held     map[string]*held // by lease token
	cur      *stream          // the open stream, nil while none is
	gen      uint64           // generation of the newest stream
	stopping bool             // graceful shutdown began: no new streams, Drain sent
	leaseDur time.Duration    // the lease duration seen on the last lease (0: none yet)
	changed  chan struct{}    // closed and replaced whenever held or stopping changes
	runCtx   context.Context  // values of Run's context, never cancelled
	started  bool
	fatal    error         // a refusal that reconnecting cannot fix
	stopped  chan struct{} // closed when Run returns: unary settles stop retrying
}

// NewWorker builds a worker on c. It panics on options that cannot work (no queue, a
// negative concurrency or grace), which are programming errors.
func NewWorker(c *Client, opts WorkerOptions) *Worker {
	if len(opts.Queues) == 0 {
		panic("jobwire: WorkerOptions.Queues is empty")
	}
	if opts.Concurrency < 0 || opts.ShutdownGrace < 0 {
		panic("jobwire: WorkerOptions.Concurrency and ShutdownGrace must not be negative")
	}
	if opts.Concurrency == 0 {
		opts.Concurrency = 1
	}
	if opts.WorkerID == "" {
		host, _ := os.Hostname()
		opts.WorkerID = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	if opts.ShutdownGrace == 0 {
		opts.ShutdownGrace = 25 * time.Second
	}
	if opts.StallTimeout == 0 {
		opts.StallTimeout = 15 * time.Second
	}
	if opts.ReconnectMin == 0 {
		opts.ReconnectMin = 500 * time.Millisecond
	}
	if opts.ReconnectMax == 0 {
		opts.ReconnectMax = 30 * time.Second
	}
	log := opts.Logger
	if log == nil {
		log = c.log
	}
	if log == nil {
		log = slog.Default()
	}
	return &Worker{
		c: c, opts: opts, handlers: map[string]rawHandler{},
		log:     log.With("worker_id", opts.WorkerID),
		held:    map[string]*held{},
		changed: make(chan struct{}),
		stopped: make(chan struct{}),
	}
}

// ID is the worker id sent to the server.
func (w *Worker) ID() string { return w.opts.WorkerID }

func (w *Worker) register(name string, h rawHandler) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started {
		panic("jobwire: register handlers before Run")
	}
	if _, dup := w.handlers[name]; dup {
		panic(fmt.Sprintf("jobwire: a handler for %q is already registered", name))
	}
	w.handlers[name] = h
}

// RunLease runs the handler registered for the lease's job name, without a server, and
// returns what the worker would send: an ack (with its result) or a Fail, and the progress
// reports the handler made (for tests; see jobwiretest).
func (w *Worker) RunLease(ctx context.Context, lease *pb.Lease) Outcome {
	h := w.handlers[lease.GetJob().GetName()]
	if h == nil {
		return noHandlerOutcome(lease.GetJob().GetName(), w.opts.WorkerID)
	}
	return callHandler(ctx, h, lease, &attempt{})
}

// Run leases and handles jobs until ctx ends or (unless disabled) SIGTERM/SIGINT arrives,
// then shuts down gracefully: it sends Drain, waits for held jobs up to ShutdownGrace,
// cancels the handlers still running (context cause ErrShutdown), hands their jobs back
// uncharged (RELEASE), and closes the stream. It returns nil after a graceful shutdown, or an error the
// server gave that reconnecting cannot fix (an invalid open, a refused token or role). A
// broken stream is not an error: Run reconnects. Run may be called once.
func (w *Worker) Run(ctx context.Context) error {
	w.mu.Lock()
	if w.started {
		w.mu.Unlock()
		return errors.New("jobwire: Worker.Run called twice")
	}
	w.started = true
	w.runCtx = context.WithoutCancel(ctx)
	w.mu.Unlock()
	defer close(w.stopped)

	stop := ctx
	skipGrace := make(chan struct{})
	if !w.opts.DisableSignalHandling {
		sig := make(chan os.Signal, 2)
		signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
		defer signal.Stop(sig)
		sctx, cancel := context.WithCancel(ctx)
		defer cancel()
		stop = sctx
		go func() {
			select {
			case s := <-sig:
				w.log.Info("signal received: shutting down gracefully", "signal", s.String(), "grace", w.opts.ShutdownGrace)
				cancel()
			case <-sctx.Done():
				return
			}
			select {
			case s := <-sig:
				w.log.Warn("second signal: skipping the rest of the grace", "signal", s.String())
				close(skipGrace)
			case <-time.After(w.opts.ShutdownGrace + time.Minute):
			}
		}()
	}

	loopDone := make(chan struct{})
	keeperCtx, stopKeeper := context.WithCancel(context.Background())
	defer stopKeeper()
	go w.keepOrphans(keeperCtx)
	go func() {
		defer close(loopDone)
		w.connectLoop(stop)
	}()
	select {
	case <-stop.Done():
	case <-loopDone: // a fatal refusal
	}
	w.shutdown(skipGrace)
	select {
	case <-loopDone:
	case <-time.After(5 * time.Second):
		w.mu.Lock()
		if w.cur != nil {
			w.cur.cancel()
		}
		w.mu.Unlock()
		<-loopDone
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.fatal
}

// failFatal records a refusal that ends the worker (from the connect loop); Run returns it.
func (w *Worker) failFatal(err error) {
	w.mu.Lock()
	w.fatal = err
	w.mu.Unlock()
}

// notifyLocked wakes everyone waiting for a change of held or stopping. Caller holds mu.
func (w *Worker) notifyLocked() {
	close(w.changed)
	w.changed = make(chan struct{})
}

// waitChangeLocked returns a channel closed at the next change. Caller holds mu.
func (w *Worker) waitChangeLocked() <-chan struct{} { return w.changed }

// freeLocked is the number of slots not held by a lease. Caller holds mu.
func (w *Worker) freeLocked() int { return w.opts.Concurrency - len(w.held) }

// heartbeatInterval is the configured one, or min(2 s, lease/3).
func (w *Worker) heartbeatInterval() time.Duration {
	if w.opts.HeartbeatInterval > 0 {
		return w.opts.HeartbeatInterval
	}
	w.mu.Lock()
	d := w.leaseDur
	w.mu.Unlock()
	iv := 2 * time.Second
	if d > 0 && d/3 < iv {
		iv = max(d/3, 50*time.Millisecond)
	}
	return iv
}

// shutdown is the graceful shutdown after Run's stop: Drain, grace, cancel, hand back, close.
func (w *Worker) shutdown(skipGrace <-chan struct{}) {
	w.mu.Lock()
	w.stopping = true
	n := len(w.held)
	if w.cur != nil {
		w.cur.send(&pb.SubscribeRequest{Message: &pb.SubscribeRequest_Drain{Drain: &pb.DrainStream{}}})
	}
	w.notifyLocked()
	w.mu.Unlock()
	w.log.Info("draining: no more leases; waiting for held jobs", "held", n, "grace", w.opts.ShutdownGrace)

	grace := time.NewTimer(w.opts.ShutdownGrace)
	defer grace.Stop()
	if !w.waitHeldEmpty(grace.C, skipGrace) {
		w.abandonHeld()
		// The Fails of what was left: a bounded wait (each is retried on UNAVAILABLE).
		settleWait := time.NewTimer(10 * time.Second)
		defer settleWait.Stop()
		if !w.waitHeldEmpty(settleWait.C, nil) {
			w.mu.Lock()
			for _, h := range w.held {
				w.log.Error("shutdown: result not settled; the lease will expire and the job is delivered again",
					"queue", h.queue, "job_id", h.id)
			}
			w.mu.Unlock()
		}
	}
	w.mu.Lock()
	cur := w.cur
	w.mu.Unlock()
	if cur != nil {
		cur.closeSend()
	}
	w.log.Info("worker stopped")
}

// waitHeldEmpty waits until no lease is held; false when a timer channel fired first.
func (w *Worker) waitHeldEmpty(timeout <-chan time.Time, skip <-chan struct{}) bool {
	for {
		w.mu.Lock()
		if len(w.held) == 0 {
			w.mu.Unlock()
			return true
		}
		ch := w.waitChangeLocked()
		w.mu.Unlock()
		select {
		case <-ch:
		case <-timeout:
			return false
		case <-skip:
			return false
		}
	}
}
