package backoff

import (
	"math"
	"slices"
	"testing"
	"time"
)

func constRand(r float64) func() float64 { return func() float64 { return r } }

func TestNext(t *testing.T) {
	const s = time.Second
	tests := []struct {
		name string
		b    Backoff
		want []time.Duration
	}{
		{
			name: "defaults no jitter",
			b:    Backoff{Rand: constRand(1)},
			want: []time.Duration{1 * s, 2 * s, 4 * s, 8 * s, 16 * s, 32 * s, 60 * s, 60 * s},
		},
		{
			name: "defaults most jitter",
			b:    Backoff{Rand: constRand(0)},
			want: []time.Duration{s / 2, 1 * s, 2 * s, 4 * s, 8 * s, 16 * s, 30 * s, 30 * s},
		},
		{
			name: "defaults mid jitter",
			b:    Backoff{Rand: constRand(0.5)},
			want: []time.Duration{750 * time.Millisecond, 1500 * time.Millisecond, 3 * s},
		},
		{
			name: "custom",
			b:    Backoff{Min: 100 * time.Millisecond, Max: time.Second, Factor: 3, Rand: constRand(1)},
			want: []time.Duration{100 * time.Millisecond, 300 * time.Millisecond, 900 * time.Millisecond, s, s},
		},
		{
			name: "factor one is constant",
			b:    Backoff{Min: 5 * s, Factor: 1, Rand: constRand(1)},
			want: []time.Duration{5 * s, 5 * s, 5 * s},
		},
		{
			name: "min above max is capped",
			b:    Backoff{Min: 10 * s, Max: 3 * s, Rand: constRand(1)},
			want: []time.Duration{3 * s, 3 * s},
		},
		{
			name: "factor below one means default",
			b:    Backoff{Factor: 0.5, Rand: constRand(1)},
			want: []time.Duration{1 * s, 2 * s, 4 * s},
		},
		{
			name: "out of range rand is clamped",
			b:    Backoff{Rand: constRand(7)},
			want: []time.Duration{1 * s, 2 * s},
		},
		{
			name: "negative rand is clamped",
			b:    Backoff{Rand: constRand(-1)},
			want: []time.Duration{s / 2, 1 * s},
		},
		{
			name: "NaN rand is clamped",
			b:    Backoff{Rand: constRand(math.NaN())},
			want: []time.Duration{s / 2, 1 * s},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got []time.Duration
			for range tc.want {
				got = append(got, tc.b.Next())
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("Next() sequence = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestReset(t *testing.T) {
	b := Backoff{Rand: constRand(1)}
	for range 5 {
		b.Next()
	}
	b.Reset()
	if got, want := b.Next(), time.Second; got != want {
		t.Errorf("Next() after Reset = %v, want %v", got, want)
	}
}

// TestBounds checks the promise with the real random source: every delay is
// within [d/2, d], so never zero and never above Max, however long it runs.
func TestBounds(t *testing.T) {
	b := Backoff{Min: 10 * time.Millisecond, Max: 5 * time.Second, Factor: 1.7}
	for i := range 10000 {
		d := b.Max
		if x := float64(b.Min) * math.Pow(b.Factor, float64(i)); x < float64(b.Max) {
			d = time.Duration(x)
		}
		if got := b.Next(); got < d/2 || got > d {
			t.Fatalf("attempt %d: Next() = %v, want within [%v, %v]", i, got, d/2, d)
		}
	}
}
