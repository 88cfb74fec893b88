// Package datadir prepares the directories where nodemgr keeps state and
// secrets (the server's store and admin token, an agent's credential): they
// must be readable by their owner only, whatever umask or earlier install
// made them.
package datadir

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
)

// Private is the mode of a data dir.
const Private fs.FileMode = 0o700

// Ensure creates dir with mode 0700, or tightens an existing one that
// others may read, write or enter. It returns the mode it found when it had
// to tighten it, so the caller can say so; zero when nothing changed.
func Ensure(dir string) (was fs.FileMode, err error) {
	// Fewer rights than 0700 for its owner are left as they are.
	return ensureMode(dir, Private, func(perm fs.FileMode) bool { return perm&0o077 == 0 }, 0o077)
}

// Passable is the mode of an agent's data dir when the agent runs suite
// tasks, hooks and services as other users: they may pass through it, by
// name, to the trees meant for them (Seal's shared entries), but not list
// it, and everything else in it is private (Seal).
const Passable fs.FileMode = 0o711

// EnsurePassable is Ensure for such a data dir: it creates dir (and any
// missing parent) with mode 0711, or gives an existing one that mode. It
// returns the mode it found when it had to take rights away from others
// (read or write), so the caller can say so; zero otherwise (0700 made
// 0711 is expected, not news).
func EnsurePassable(dir string) (was fs.FileMode, err error) {
	return ensureMode(dir, Passable, func(perm fs.FileMode) bool { return perm == Passable }, 0o066)
}

// ensureMode creates dir with mode, or gives an existing one that mode
// unless ok takes the mode it has; it returns the mode found when that
// held any of the news bits.
func ensureMode(dir string, mode fs.FileMode, ok func(fs.FileMode) bool, news fs.FileMode) (was fs.FileMode, err error) {
	if err := os.MkdirAll(dir, mode); err != nil {
		return 0, fmt.Errorf("create data dir %s: %w", dir, err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return 0, fmt.Errorf("data dir %s: %w", dir, err)
	}
	if !fi.IsDir() {
		return 0, fmt.Errorf("data dir %s is not a directory; choose another --data-dir", dir)
	}
	perm := fi.Mode().Perm()
	if ok(perm) {
		return 0, nil
	}
	if err := os.Chmod(dir, mode); err != nil {
		return 0, fmt.Errorf("data dir %s has mode %s and holds secrets, and it could not be made %s (%w); "+
			"run chmod %o %s or choose another --data-dir", dir, perm, mode, err, mode, dir)
	}
	if perm&news != 0 {
		return perm, nil
	}
	return 0, nil
}

// Seal makes every entry of dir but the shared ones private to its owner
// (no rights for group or others), whatever an earlier version, a umask or
// a hand left there; symbolic links are left alone. It returns the
// entries it changed. A data dir that others may pass through (Passable)
// is sealed before any of their code runs, so that they reach nothing in
// it but the shared trees.
func Seal(dir string, shared ...string) (changed []string, err error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("seal %s: %w", dir, err)
	}
	for _, e := range entries {
		if slices.Contains(shared, e.Name()) || e.Type()&fs.ModeSymlink != 0 {
			continue
		}
		fi, err := e.Info()
		if err != nil {
			continue // gone meanwhile
		}
		if fi.Mode().Perm()&0o077 == 0 {
			continue
		}
		p := filepath.Join(dir, e.Name())
		if err := os.Chmod(p, fi.Mode().Perm()&^0o077); err != nil {
			return changed, fmt.Errorf("seal %s: %w", p, err)
		}
		changed = append(changed, e.Name())
	}
	return changed, nil
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
