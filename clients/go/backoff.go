package jobwire

import (
	"context"
	"math/rand/v2"
	"time"
)

// backoff is exponential backoff with "Full Jitter" (AWS Architecture Blog, "Exponential
// Backoff and Jitter", 2015): the n-th wait is drawn uniformly from [0, min(max, base*2^n)).
// Full jitter spreads reconnecting workers apart, so a restarted server is not hit by every
// worker at once.
type backoff struct {
	base, max time.Duration
	n         int
}

// next is the next wait.
func (b *backoff) next() time.Duration {
	ceil := b.base << min(b.n, 30)
	if ceil <= 0 || ceil > b.max {
		ceil = b.max
	}
	b.n++
	return time.Duration(rand.Int64N(int64(ceil) + 1))
}

// reset starts over after a success.
func (b *backoff) reset() { b.n = 0 }

// sleepCtx waits d; false when ctx ended first.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
