package humantime

import (
	"testing"
	"time"
)

func TestAgo(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name string
		age  time.Duration
		want string
	}{
		{"ahead of now", -time.Second, "just now"},
		{"now", 0, "0s ago"},
		{"seconds", 4*time.Second + 900*time.Millisecond, "4s ago"},
		{"a minute", time.Minute, "1m ago"},
		{"minutes", 3*time.Minute + 59*time.Second, "3m ago"},
		{"an hour", time.Hour, "1h ago"},
		{"just under two days", Days - time.Second, "47h ago"},
		{"two days", Days, "2d ago"},
		{"days", 10*24*time.Hour + 5*time.Hour, "10d ago"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Ago(now.Add(-tc.age), now); got != tc.want {
				t.Errorf("Ago(now-%v) = %q, want %q", tc.age, got, tc.want)
			}
		})
	}
}
