//go:build !linux

package filecopy

import (
	"errors"
	"os"
)

// cloneFile: no reflinks here; the caller copies.
func cloneFile(out, in *os.File) error { return errors.ErrUnsupported }
