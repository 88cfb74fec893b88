// Package datadir prepares the directories where nodemgr keeps state and
// secrets (the server's store and admin token, an agent's credential): they
// must be readable by their owner only, whatever umask or earlier install
// made them.
package datadir

import (
	"fmt"
	"io/fs"
	"os"
)

// Private is the mode of a data dir.
const Private fs.FileMode = 0o700

// Ensure creates dir with mode 0700, or tightens an existing one that
// others may read, write or enter. It returns the mode it found when it had
// to tighten it, so the caller can say so; zero when nothing changed.
func Ensure(dir string) (was fs.FileMode, err error) {
	if err := os.MkdirAll(dir, Private); err != nil {
		return 0, fmt.Errorf("create data dir %s: %w", dir, err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return 0, fmt.Errorf("data dir %s: %w", dir, err)
	}
	if !fi.IsDir() {
		return 0, fmt.Errorf("data dir %s is not a directory; choose another --data-dir", dir)
	}
	if fi.Mode().Perm()&0o077 == 0 {
		return 0, nil
	}
	if err := os.Chmod(dir, Private); err != nil {
		return 0, fmt.Errorf("data dir %s has mode %s and holds secrets, and it could not be made private (%w); "+
			"run chmod 700 %s or choose another --data-dir", dir, fi.Mode().Perm(), err, dir)
	}
	return fi.Mode().Perm(), nil
}

// PrivateFile makes path mode 0600 when it exists with more, returning the
// mode it had (zero when nothing changed or it does not exist).
func PrivateFile(path string) (was fs.FileMode, err error) {
	fi, err := os.Stat(path)
	if os.IsNotExist(err) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	if fi.Mode().Perm()&0o077 == 0 {
		return 0, nil
	}
	if err := os.Chmod(path, 0o600); err != nil {
		return 0, fmt.Errorf("make %s private: %w", path, err)
	}
	return fi.Mode().Perm(), nil
}
