package sqlrow

import (
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/api"
)

func TestTallyMove(t *testing.T) {
	tl := Tally{}
	tl.Move("s1", "", api.TaskReady, 3)              // three new tasks
	tl.Move("s1", api.TaskReady, api.TaskRunning, 2) // two claimed
	tl.Move("s1", api.TaskRunning, api.TaskRunning, 5)
	tl.Move("s2", api.TaskReady, api.TaskCancelled, 0)
	if got, want := *tl["s1"], (api.TaskCounts{Ready: 1, Running: 2}); got != want {
		t.Errorf("s1 = %+v, want %+v", got, want)
	}
	if _, ok := tl["s2"]; ok {
		t.Errorf("a move of no task made a row for s2")
	}
}

func TestEncodings(t *testing.T) {
	for _, tc := range []struct {
		v    any
		want string
	}{
		{[]string(nil), "[]"}, {map[string]string(nil), "{}"}, {[]string{"a"}, `["a"]`},
	} {
		if got, err := JSONArg(tc.v); err != nil || got != tc.want {
			t.Errorf("JSONArg(%#v) = %q, %v, want %q", tc.v, got, err, tc.want)
		}
	}
	if got, err := Strings("null"); err != nil || got == nil || len(got) != 0 {
		t.Errorf(`Strings("null") = %#v, %v, want an empty list`, got, err)
	}
	if got := ZeroNano(time.Time{}); got != 0 {
		t.Errorf("ZeroNano(zero) = %d, want 0", got)
	}
	if got := NanoTime(0); !got.IsZero() {
		t.Errorf("NanoTime(0) = %v, want the zero time", got)
	}
	at := time.Date(2026, 11, 26, 18, 0, 0, 5, time.UTC)
	if got := FromNanos(at.UnixNano()); !got.Equal(at) || got.Location() != time.UTC {
		t.Errorf("FromNanos() = %v, want %v in UTC", got, at)
	}
}
