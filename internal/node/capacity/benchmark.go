package capacity

import (
	"context"
	"crypto/sha256"
	"fmt"
	"math"
	"runtime"
	"time"
)

// DefaultBenchmarkDuration is how long Benchmark runs when not told.
const DefaultBenchmarkDuration = 300 * time.Millisecond

// benchBlock is the work unit: one SHA-256 of this many fixed bytes.
const benchBlock = 64 << 10

// Benchmark measures the speed of one core: it hashes a 64 KiB buffer with
// SHA-256 over and over, each hash chained into the next, for d (DefaultBenchmarkDuration if d ≤ 0) and
// returns the throughput in MiB/s, to one decimal. That is the CPU score
// onboarding registers. SHA-256 is integer work that every Go build has
// and that no cache or disk can flatter; CPUs with SHA extensions score
// several times higher, which is fair: they are that much faster at it.
// The score compares nodes measured this way, nothing else.
func Benchmark(ctx context.Context, d time.Duration) (float64, error) {
	if d <= 0 {
		d = DefaultBenchmarkDuration
	}
	// One thread for the whole run, so the score is one core's.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()

	buf := make([]byte, benchBlock)
	for i := range buf {
		buf[i] = byte(i % 251)
	}
	sum := sha256.Sum256(buf) // warm up: page in the buffer, wake the core
	const perCheck = 16       // blocks between looks at the clock and ctx: about 1 ms
	start := time.Now()
	var blocks int64
	for {
		for range perCheck {
			// Chaining each hash into the next keeps the work real and
			// the sequence the same on every machine.
			copy(buf, sum[:])
			sum = sha256.Sum256(buf)
		}
		blocks += perCheck
		if err := ctx.Err(); err != nil {
			return 0, fmt.Errorf("cpu benchmark: %w", err)
		}
		if elapsed := time.Since(start); elapsed >= d {
			mib := float64(blocks*benchBlock) / (1 << 20)
			return math.Round(mib/elapsed.Seconds()*10) / 10, nil
		}
	}
}
