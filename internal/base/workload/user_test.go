package workload

import (
	"errors"
	"strings"
	"testing"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
)

func TestPrivileged(t *testing.T) {
	for name, want := range map[string]bool{"root": true, "agent": true, "0": true, "": false, "nobody": false, "nodemgr-task": false, "1000": false} {
		if got := Privileged(name); got != want {
			t.Errorf("Privileged(%q) = %v, want %v", name, got, want)
		}
	}
}

func TestCheckUser(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"", true}, {"nobody", true}, {"build_bot.2", true}, {"65534", true},
		{"a b", false}, {"-rf", false}, {"../etc", false}, {"x:y", false}, {strings.Repeat("a", 33), false},
	} {
		err := CheckUser("run_as", tc.name)
		var fe *errdefs.FieldError
		if tc.ok != (err == nil) || (err != nil && (!errors.As(err, &fe) || fe.Field != "run_as")) {
			t.Errorf("CheckUser(run_as, %q) = %v, want ok %v or a field error on run_as", tc.name, err, tc.ok)
		}
	}
}
