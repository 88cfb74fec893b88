package rsync

import (
	"errors"
	"slices"
	"testing"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
)

// TestRelayCommand checks that the relay runs rsync --server, as rsync -s
// asks for it, and nothing else.
func TestRelayCommand(t *testing.T) {
	for _, tc := range []struct {
		args []string
		ok   bool
	}{
		{[]string{hostAlias, "rsync", "--server", "-sltpre.iLsfxCIvu"}, true},
		{[]string{hostAlias, "rsync", "--server", "--sender", "-sltpre.iLsfxCIvu", ".", "/srv/x"}, true},
		{[]string{"other-host", "rsync", "--server", "-s"}, false},
		{[]string{hostAlias, "sh", "-c", "id"}, false},
		{[]string{hostAlias, "rsync"}, false},
		{[]string{hostAlias, "rsync", "--server", "-s", "x;id"}, false},
		{[]string{hostAlias, "rsync", "--server", "$(id)"}, false},
		{[]string{hostAlias, "rsync", "--server", "a b"}, false},
	} {
		argv, err := relayCommand(tc.args)
		switch {
		case tc.ok && (err != nil || !slices.Equal(argv, tc.args[1:])):
			t.Errorf("relayCommand(%q) = %q, %v; want %q", tc.args, argv, err, tc.args[1:])
		case !tc.ok && !errors.Is(err, errdefs.ErrPermission):
			t.Errorf("relayCommand(%q) = %q, %v; want permission denied", tc.args, argv, err)
		}
	}
}
