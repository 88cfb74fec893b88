// Package backoff computes retry delays that grow exponentially and carry
// "equal" jitter: each delay is drawn from [d/2, d], where d doubles (by
// Factor) from Min up to Max. Half the delay is fixed, so a retry never
// fires immediately; the other half is random, so many agents that lost
// the server together do not come back together.
//
// A Backoff is a small value owned by one retry loop:
//
//	b := backoff.Backoff{}
//	for {
//		if err := connect(ctx); err == nil {
//			b.Reset()
//			...
//		}
//		time.Sleep(b.Next()) // or a timer raced against ctx
//	}
package backoff

import (
	"math"
	"math/rand/v2"
	"time"
)

// Defaults used for zero fields.
const (
	DefaultMin    = 1 * time.Second
	DefaultMax    = 60 * time.Second
	DefaultFactor = 2.0
)

// Backoff yields successive retry delays. The zero value is ready to use
// with the defaults. It is not safe for concurrent use.
type Backoff struct {
	Min    time.Duration // base delay before jitter; 0 means DefaultMin
	Max    time.Duration // cap on any delay; 0 means DefaultMax
	Factor float64       // growth per attempt; below 1 (including 0) means DefaultFactor
	// Rand returns a number in [0, 1); nil means math/rand/v2.Float64.
	// Tests inject it to make delays deterministic.
	Rand func() float64

	attempt int // retries so far since the last Reset
}

// Next returns the delay before the next retry and advances the attempt
// count. For attempt n (from 0) it lies in [d/2, d] with
// d = min(Max, Min*Factor^n).
func (b *Backoff) Next() time.Duration {
	lo, hi, f := b.params()
	d := hi
	if x := float64(lo) * math.Pow(f, float64(b.attempt)); x < float64(hi) {
		d = time.Duration(x)
		// Only count while still growing: once at the cap the delay stays
		// there, and the counter cannot overflow however long we retry.
		b.attempt++
	}
	r := b.rand()
	half := float64(d) / 2
	return time.Duration(half + r*half)
}

// Reset starts the sequence again from Min, typically after a success.
func (b *Backoff) Reset() { b.attempt = 0 }

func (b *Backoff) params() (lo, hi time.Duration, f float64) {
	lo, hi, f = b.Min, b.Max, b.Factor
	if lo <= 0 {
		lo = DefaultMin
	}
	if hi <= 0 {
		hi = DefaultMax
	}
	if f < 1 {
		f = DefaultFactor
	}
	return lo, hi, f
}

// rand returns the injected or default random number, clamped to [0, 1] so
// that a careless Rand cannot push a delay outside [d/2, d].
func (b *Backoff) rand() float64 {
	var r float64
	if b.Rand != nil {
		r = b.Rand()
	} else {
		r = rand.Float64()
	}
	if !(r >= 0) { // also catches NaN
		return 0
	}
	return min(r, 1)
}
