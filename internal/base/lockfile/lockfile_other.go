//go:build !linux

package lockfile

import (
	"errors"
	"fmt"
)

func acquire(path, _ string) (*Lock, error) {
	return nil, fmt.Errorf("acquire lock %s: %w", path, errors.ErrUnsupported)
}
