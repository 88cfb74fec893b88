//go:build !linux

package bench

import (
	"errors"
	"fmt"
	"os"
)

// dropCache: bench rss reads the agent's memory from /proc, Linux's.
func dropCache(*os.File) error {
	return fmt.Errorf("bench rss: %w: it reads /proc, Linux only", errors.ErrUnsupported)
}
