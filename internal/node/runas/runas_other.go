//go:build !linux

package runas

import (
	"errors"
	"io/fs"
	"os"
)

// Other systems: the agent never switches users there.
func canSwitch() bool { return false }

func mayEnter(fs.FileInfo, User) bool { return true }

func current() (User, error) {
	return User{UID: uint32(os.Getuid()), GID: uint32(os.Getgid())}, nil
}

func ensureTaskUser() (User, string, error) { return User{}, "", errors.ErrUnsupported }
