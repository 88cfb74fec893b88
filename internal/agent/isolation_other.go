//go:build !linux

package agent

import (
	"io/fs"

	"github.com/nodemgr/nodemgr/internal/runas"
)

// mayEnter: the agent never switches users here.
func mayEnter(fs.FileInfo, runas.User) bool { return true }
