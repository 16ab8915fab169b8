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
// BullMQ's queue-wide rate limit).
type RateLimitedError struct {
	After      time.Duration
	PauseQueue bool
}

func (e *RateLimitedError) Error() string {
	if e.PauseQueue {
		return fmt.Sprintf("rate limited: pause the queue for %s", e.After)
	}
	return fmt.Sprintf("rate limited: retry after %s", e.After)
}

// RateLimited puts the job back for d without using an attempt (see [RateLimitedError]).
func RateLimited(d time.Duration, pauseQueue bool) error {
	return &RateLimitedError{After: d, PauseQueue: pauseQueue}
}

// ErrLeaseLost is the cause of a handler's context when its lease is gone (expired and
// given to another worker, or the job was deleted): its result can no longer be settled.
var ErrLeaseLost = errors.New("jobwire: lease lost")

// ErrShutdown is the cause of a handler's context when the worker's shutdown grace ended
// before the handler returned; the job is failed with RETRY.
var ErrShutdown = errors.New("jobwire: worker shut down before the handler returned")

func errText(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}
