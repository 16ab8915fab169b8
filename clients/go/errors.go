package jobwire

import (
	"errors"
	"fmt"
	"time"
)

// What a handler's error makes of the attempt. Check with errors.As; wrap freely.

// NonRetryableError marks a permanent failure: the job goes to the dead-letter queue now
// (FAIL_DISPOSITION_NO_RETRY), skipping its remaining attempts (Temporal's non_retryable).
type NonRetryableError struct{ Err error }

func (e *NonRetryableError) Error() string { return "non-retryable: " + errText(e.Err) }
func (e *NonRetryableError) Unwrap() error { return e.Err }

// NonRetryable marks err as permanent: the job is dead-lettered without another attempt.
func NonRetryable(err error) error { return &NonRetryableError{Err: err} }

// RetryAfterError retries the job (FAIL_DISPOSITION_RETRY, an attempt is used) no sooner
// than After from now, overriding the job's backoff for this retry (0 to 7 days).
type RetryAfterError struct {
	After time.Duration
	Err   error
}

func (e *RetryAfterError) Error() string {
	return fmt.Sprintf("retry after %s: %s", e.After, errText(e.Err))
}
func (e *RetryAfterError) Unwrap() error { return e.Err }

// RetryAfter retries the job after d instead of its backoff.
func RetryAfter(d time.Duration, err error) error { return &RetryAfterError{After: d, Err: err} }

// RateLimitedError says the downstream asked to slow down (an HTTP 429): the job comes back
// after After without using an attempt (FAIL_DISPOSITION_RATE_LIMITED). With PauseQueue the
// whole queue leases nothing for After, on every replica (the limit is the queue's, like
// BullMQ's queue-wide rate limit). With PauseGroup only the job's group (its
// [GroupKey]: the tenant whose limit was hit) leases nothing for After; the rest of the
// queue goes on.
type RateLimitedError struct {
	After      time.Duration
	PauseQueue bool
	PauseGroup bool
}

func (e *RateLimitedError) Error() string {
	switch {
	case e.PauseQueue:
		return fmt.Sprintf("rate limited: pause the queue for %s", e.After)
	case e.PauseGroup:
		return fmt.Sprintf("rate limited: pause the job's group for %s", e.After)
	}
	return fmt.Sprintf("rate limited: retry after %s", e.After)
}

// RateLimited puts the job back for d without using an attempt (see [RateLimitedError]).
func RateLimited(d time.Duration, pauseQueue bool) error {
	return &RateLimitedError{After: d, PauseQueue: pauseQueue}
}

// RateLimitedGroup puts the job back for d without using an attempt and pauses the job's
// group for d on every replica: the downstream's limit is the tenant's (see
// [RateLimitedError]).
func RateLimitedGroup(d time.Duration) error {
	return &RateLimitedError{After: d, PauseGroup: true}
}

// ErrLeaseLost is the cause of a handler's context when its lease is gone (expired and
// given to another worker, or the job was deleted): its result can no longer be settled.
var ErrLeaseLost = errors.New("jobwire: lease lost")

// ErrJobCancelled is the cause of a handler's context when its job was cancelled
// ([Client.CancelJob], CancelJobs): context.Cause(ctx) is a [*CancelledError] that matches
// it with errors.Is. Return it (or any error) and the worker fails the attempt, which ends
// the job CANCELLED; return nil and the job completes after all.
var ErrJobCancelled = errors.New("jobwire: job cancelled")

// CancelledError is the cause of a handler's context when its job was cancelled: the
// reason given to CancelJob and when the server revokes the lease if the job is not
// settled by then (the queue's cancel_grace). errors.Is(err, ErrJobCancelled) is true.
type CancelledError struct {
	Reason     string
	RevokeTime time.Time
}

func (e *CancelledError) Error() string {
	if e.Reason == "" {
		return ErrJobCancelled.Error()
	}
	return ErrJobCancelled.Error() + ": " + e.Reason
}

// Is makes errors.Is(err, ErrJobCancelled) true.
func (e *CancelledError) Is(target error) bool { return target == ErrJobCancelled }

// ErrShutdown is the cause of a handler's context when the worker's shutdown grace ended
// before the handler returned; the job is failed with RETRY.
var ErrShutdown = errors.New("jobwire: worker shut down before the handler returned")

func errText(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}
