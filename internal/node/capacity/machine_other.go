//go:build !linux

package capacity

import (
	"errors"

	"github.com/nodemgr/nodemgr/api"
)

// ReadMachineFree is implemented on Linux only; elsewhere the books alone
// decide what fits.
func ReadMachineFree(dir string) (api.Resources, error) {
	return api.Resources{}, errors.ErrUnsupported
}
