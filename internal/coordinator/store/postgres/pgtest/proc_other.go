//go:build !linux

package pgtest

import (
	"errors"
	"os"
	"syscall"
)

// serverUser is nil: the server runs as the tests. Running it as another
// user is done on Linux only.
func serverUser() (*account, error) {
	if os.Geteuid() == 0 {
		return nil, errors.Join(errNoUser, errors.ErrUnsupported)
	}
	return nil, nil
}

func sysProcAttr(*account, bool) *syscall.SysProcAttr { return nil }
