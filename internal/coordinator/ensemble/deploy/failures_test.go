package deploy

import (
	"testing"
	"time"
)

// TestFailuresLog: a failure repeated every tick is logged when it starts,
// when its reason changes (at most every 10 s), once a minute while it
// stays, and again from scratch after it was ok.
func TestFailuresLog(t *testing.T) {
	var f failures
	at := func(s int) time.Time { return time.Unix(1000+int64(s), 0) }
	steps := []struct {
		sec       int
		reason    string
		ok        bool // the try worked
		wantLog   bool
		wantQuiet int
	}{
		{sec: 0, reason: "no fit", wantLog: true},
		{sec: 1, reason: "no fit"},
		{sec: 2, reason: "no fit"},
		{sec: 5, reason: "n2 refused"}, // changed, but within 10 s
		{sec: 12, reason: "n2 refused", wantLog: true, wantQuiet: 3},
		{sec: 13, reason: "no fit"}, // changed, within 10 s
		{sec: 40, reason: "n2 refused"},
		{sec: 72, reason: "n2 refused", wantLog: true, wantQuiet: 2},
		{sec: 73, ok: true},
		{sec: 74, reason: "no fit", wantLog: true},
	}
	for _, st := range steps {
		if st.ok {
			if !f.ok("k") {
				t.Errorf("at %ds: ok() = false, want true (it was failing)", st.sec)
			}
			continue
		}
		log, quiet := f.fail("k", st.reason, at(st.sec))
		if log != st.wantLog || quiet != st.wantQuiet {
			t.Errorf("at %ds: fail(%q) = %v, %d; want %v, %d", st.sec, st.reason, log, quiet, st.wantLog, st.wantQuiet)
		}
	}
	f.forget(at(75))
	if f.ok("k") {
		t.Error("ok() after forget = true, want the failure forgotten")
	}
}
