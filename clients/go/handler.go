package jobwire

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"runtime/debug"
	"sync"
	"time"

	pb "github.com/jobwire/jobwire/clients/go/gen/jobwire/v1"
)

// Job is one leased attempt of a job, as a handler sees it, with the payload decoded into T.
type Job[T any] struct {
	// The job's queue, id and name (its type, e.g. "send-welcome-email").
	Queue, ID, Name string
	// The payload decoded from JSON (for HandleRaw: the bytes as sent).
	Payload T
	// The payload bytes as sent, and their MIME type if the producer gave one.
	RawPayload  []byte
	ContentType string
	// The producer's metadata (trace context, tenant, ...).
	Metadata map[string]string
	// This attempt's number, 1-based, and the runs the job may use.
	Attempt, MaxAttempts uint32
	// Stable across attempts and replays of the job: pass it to downstream providers so a
	// retried attempt cannot act twice.
	IdempotencyKey string
	// The fencing token of this lease, and its deadline (the worker keeps renewing it).
	LeaseToken    string
	LeaseDeadline time.Time
	// The job's group (empty: the queue's default group).
	GroupKey string
	// The checkpoint the previous attempt saved ([Job.SaveCheckpoint]); nil when none: resume
	// from it.
	Checkpoint []byte
	// The lease as received, with the job's last failed attempt (Lease.Job.Errors) and its
	// last progress (Lease.Job.Progress, ProgressMessage).
	Lease *pb.Lease

	att *attempt
}

// attempt links a handler's Job to the worker running it: progress reports and the result.
type attempt struct {
	// report saves a progress report; nil outside a worker (RunLease: recorded instead).
	report func(ctx context.Context, r Report) error

	mu      sync.Mutex
	result  []byte
	reports []Report
}

// Progress reports how far the attempt got: percent (0 to 100) and a short message (up to
// 256 bytes; "" keeps the last one), saved on the job for GetJob, dashboards and the next
// attempt's Lease. It is sent on the worker's stream and waits for the server's answer: nil
// once saved; an error wrapping [ErrLeaseLost] when the lease is gone (stop: the result
// cannot be settled); another status error when refused (e.g. INVALID_ARGUMENT for a
// percent above 100), or ctx's error.
func (j *Job[T]) Progress(ctx context.Context, percent uint32, message string) error {
	r := Report{Progress: &percent}
	if message != "" {
		r.Message = &message
	}
	return j.Report(ctx, r)
}

// SaveCheckpoint saves b as the job's checkpoint: if this attempt fails, the next one gets
// it in [Job.Checkpoint] and can resume from there. Up to the server's checkpoint limit
// (64 KiB by default: longer is RESOURCE_EXHAUSTED and nothing is saved); an empty b clears
// it. Errors as [Job.Progress].
func (j *Job[T]) SaveCheckpoint(ctx context.Context, b []byte) error {
	if b == nil {
		b = []byte{}
	}
	return j.Report(ctx, Report{Checkpoint: b})
}

// Report saves progress, message and checkpoint at once (the fields set); see
// [Job.Progress].
func (j *Job[T]) Report(ctx context.Context, r Report) error {
	if j.att == nil {
		return nil
	}
	if j.att.report == nil {
		j.att.mu.Lock()
		j.att.reports = append(j.att.reports, r)
		j.att.mu.Unlock()
		return nil
	}
	return j.att.report(ctx, r)
}

// SetResult attaches b to the job's Ack: when the handler returns nil the job completes
// with b as its result (GetJob's job.result; up to the server's result limit, 64 KiB by
// default). A later call replaces it; ignored when the handler returns an error.
func (j *Job[T]) SetResult(b []byte) {
	if j.att == nil {
		return
	}
	j.att.mu.Lock()
	j.att.result = bytes.Clone(b)
	j.att.mu.Unlock()
}

// HandlerFunc handles one attempt of a job. Return nil to ack it (with the result given to
// [Job.SetResult], if any), or an error to fail the attempt (see [NonRetryable],
// [RetryAfter], [RateLimited], [RateLimitedGroup]; any other error retries per the job's
// backoff). ctx is cancelled when the job is cancelled (cause a [*CancelledError], which
// matches [ErrJobCancelled]), when the lease is lost (cause [ErrLeaseLost]) or when the
// worker's shutdown grace ends (cause [ErrShutdown]); see context.Cause.
type HandlerFunc[T any] func(ctx context.Context, job *Job[T]) error

// rawHandler is a handler with its decoding step, as the worker stores it.
type rawHandler func(ctx context.Context, lease *pb.Lease, att *attempt) error

// Handle registers fn for jobs named name on w. The payload is decoded from JSON into T; a
// payload that does not decode fails the job as non-retryable (another attempt cannot fix
// it). Register every handler before [Worker.Run]; a second registration of a name panics.
func Handle[T any](w *Worker, name string, fn HandlerFunc[T]) {
	w.register(name, func(ctx context.Context, lease *pb.Lease, att *attempt) error {
		job := newJob[T](lease, att)
		if err := json.Unmarshal(lease.GetJob().GetPayload(), &job.Payload); err != nil {
			return NonRetryable(&DecodeError{Name: name, Type: fmt.Sprintf("%T", job.Payload), Err: err})
		}
		return fn(ctx, job)
	})
}

// DecodeError is a payload that did not decode from JSON into the handler's type; the job
// is failed as non-retryable (error type "*jobwire.DecodeError").
type DecodeError struct {
	Name, Type string
	Err        error
}

// ErrorType names the error type recorded on the job, so that a decode failure is told
// apart from other non-retryable errors.
func (e *DecodeError) ErrorType() string { return "*jobwire.DecodeError" }

func (e *DecodeError) Error() string {
	return fmt.Sprintf("decode the payload of %q as %s: %v", e.Name, e.Type, e.Err)
}
func (e *DecodeError) Unwrap() error { return e.Err }

// HandleRaw registers fn for jobs named name on w with the payload as bytes, undecoded.
func HandleRaw(w *Worker, name string, fn HandlerFunc[[]byte]) {
	w.register(name, func(ctx context.Context, lease *pb.Lease, att *attempt) error {
		job := newJob[[]byte](lease, att)
		job.Payload = job.RawPayload
		return fn(ctx, job)
	})
}

func newJob[T any](l *pb.Lease, att *attempt) *Job[T] {
	j := l.GetJob()
	job := &Job[T]{
		Queue: j.GetQueue(), ID: j.GetJobId(), Name: j.GetName(),
		RawPayload: j.GetPayload(), ContentType: j.GetContentType(), Metadata: j.GetMetadata(),
		Attempt: l.GetAttempt(), MaxAttempts: j.GetMaxAttempts(),
		IdempotencyKey: l.GetIdempotencyKey(), LeaseToken: l.GetLeaseToken(),
		LeaseDeadline: l.GetLeaseDeadline().AsTime(), GroupKey: j.GetGroupKey(), Lease: l, att: att,
	}
	if len(j.GetCheckpoint()) > 0 {
		job.Checkpoint = j.GetCheckpoint()
	}
	return job
}

// Outcome is what a handler's return makes of an attempt: an ack, or a Fail with its
// disposition. [Worker.RunLease] returns it (for tests: see the jobwiretest package).
type Outcome struct {
	// Ack: the job completed. Otherwise the fields below describe the Fail.
	Ack bool
	// RETRY, NO_RETRY or RATE_LIMITED; RELEASE for a job the worker's shutdown hands back.
	Disposition pb.FailDisposition
	// retry_after of the Fail (RetryAfter, RateLimited); 0: unset.
	RetryAfter time.Duration
	// pause_queue and pause_group of a RATE_LIMITED Fail.
	PauseQueue, PauseGroup bool
	// The result sent with the Ack ([Job.SetResult]); nil: none.
	Result []byte
	// The progress reports the handler made, in order (RunLease only: a worker sends them).
	Reports []Report
	// The error recorded on the job: message, type, details.
	Error *pb.JobError
	// The handler's error as returned (nil for an ack).
	Err error
}

// Limits of JobError (worker_service.proto): longer values are cut here, so a long message
// is recorded instead of refused.
const (
	maxErrorType = 128
	maxDetails   = 8 << 10
	maxMessage   = 8 << 10
)

// outcomeOf maps a handler's error (or panic, given as its stack) to an Outcome.
func outcomeOf(err error, panicStack []byte) Outcome {
	if err == nil {
		return Outcome{Ack: true}
	}
	o := Outcome{Disposition: pb.FailDisposition_FAIL_DISPOSITION_RETRY, Err: err}
	var (
		nr *NonRetryableError
		ra *RetryAfterError
		rl *RateLimitedError
	)
	cause := err
	errType := ""
	switch {
	case errors.As(err, &rl):
		o.Disposition, o.RetryAfter = pb.FailDisposition_FAIL_DISPOSITION_RATE_LIMITED, rl.After
		o.PauseQueue, o.PauseGroup = rl.PauseQueue, rl.PauseGroup
		cause, errType = rl, "RateLimited"
	case errors.Is(err, ErrJobCancelled):
		// The job was cancelled and the handler stopped: any Fail ends it CANCELLED; NO_RETRY
		// says the same to a server that would not know of the cancel.
		o.Disposition, errType = pb.FailDisposition_FAIL_DISPOSITION_NO_RETRY, "cancelled"
	case errors.As(err, &nr):
		o.Disposition, errType = pb.FailDisposition_FAIL_DISPOSITION_NO_RETRY, "NonRetryable"
		if nr.Err != nil {
			cause = nr.Err
		}
	case errors.As(err, &ra):
		o.RetryAfter, errType = ra.After, "RetryAfter"
		if ra.Err != nil {
			cause = ra.Err
		}
	default:
		errType = typeName(cause)
	}
	details := fmt.Sprintf("%+v", err)
	if details == err.Error() {
		details = ""
	}
	if panicStack != nil {
		details = string(panicStack)
	}
	var typed ErrorTyper
	if errors.As(err, &typed) {
		errType = typed.ErrorType()
	}
	o.Error = &pb.JobError{
		Message:   truncate(cause.Error(), maxMessage),
		ErrorType: truncate(errType, maxErrorType),
		Details:   truncate(details, maxDetails),
	}
	return o
}

// noHandlerOutcome is the outcome of a job whose name has no handler on this worker: RETRY
// with the job's backoff (a worker with the handler may come), error type "no_handler".
func noHandlerOutcome(name, workerID string) Outcome {
	o := outcomeOf(fmt.Errorf("no handler registered for job name %q on worker %s", name, workerID), nil)
	o.Error.ErrorType = "no_handler"
	return o
}

// ErrorTyper is an error that names its own error type (JobError.error_type, e.g.
// "invalid_address"), which dead-letter filters and alerts match on; it may be the error
// given to NonRetryable or RetryAfter, or wrapped inside it. Without it the error type is
// "NonRetryable", "RetryAfter" or "RateLimited" for those errors, and the Go type of any
// other error, e.g. "*net.OpError" (the conventions every jobwire SDK follows,
// clients/conformance/README.md).
type ErrorTyper interface {
	error
	ErrorType() string
}

// typeName is the Go type of err, e.g. "*net.OpError" or "main.InvalidAddress".
func typeName(err error) string {
	if p, ok := err.(panicError); ok {
		return "panic: " + reflect.TypeOf(p.value).String()
	}
	return reflect.TypeOf(err).String()
}

// panicError is a recovered handler panic.
type panicError struct{ value any }

func (p panicError) Error() string { return fmt.Sprintf("handler panicked: %v", p.value) }

// callHandler runs h, turning a panic into an error with the stack; an ack carries the
// result the handler set.
func callHandler(ctx context.Context, h rawHandler, lease *pb.Lease, att *attempt) (o Outcome) {
	defer func() {
		if v := recover(); v != nil {
			o = outcomeOf(panicError{value: v}, debug.Stack())
		}
		att.mu.Lock()
		if o.Ack {
			o.Result = att.result
		}
		o.Reports = att.reports
		att.mu.Unlock()
	}()
	return outcomeOf(h(ctx, lease, att), nil)
}

// truncate cuts s to at most n bytes on a rune boundary, saying how much was cut.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	marker := fmt.Sprintf("…[truncated %d bytes]", len(s)-n)
	cut := n - len(marker)
	if cut < 0 {
		cut = 0
	}
	for cut > 0 && cut < len(s) && s[cut]&0xC0 == 0x80 {
		cut--
	}
	return s[:cut] + marker
}
