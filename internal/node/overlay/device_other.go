//go:build !linux

package overlay

import (
	"errors"
	"fmt"
	"log/slog"
	"runtime"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

// openDevice fails: the mesh is driven through Linux's TUN and netlink.
func openDevice(Config, wgtypes.Key, *slog.Logger) (device, error) {
	return nil, fmt.Errorf("wireguard device on %s: %w", runtime.GOOS, errors.ErrUnsupported)
}
