// Package atomicfile replaces small state files so that a crash leaves
// either the old file or the new one, never a torn one: the agent's
// state, its service and container records, its resource books and its
// port allocator all keep their state this way.
package atomicfile

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Write replaces path with data, mode 0600: it writes a temporary file in
// the same directory, syncs it, renames it into place and syncs the
// directory, so that the rename survives a crash too.
func Write(path string, data []byte) (err error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	tmp, err := os.CreateTemp(dir, tempPrefix(base)+"*") // mode 0600
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			os.Remove(tmp.Name())
		}
	}()
	_, err = tmp.Write(data)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	return SyncDir(dir)
}

// SyncDir makes renames and removals in dir durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// tempPrefix starts the temporary names for base: hidden, and never
// ending like base, so a leftover is not read as a state file.
func tempPrefix(base string) string { return "." + base + ".tmp-" }

// IsTemp reports whether name (a file name, no directory) is a temporary
// file Write left behind when it was cut short.
func IsTemp(name string) bool {
	return strings.HasPrefix(name, ".") && strings.Contains(name, ".tmp-")
}

// RemoveTemps deletes every temporary file interrupted writes left in dir:
// for a directory of records that one owner writes.
func RemoveTemps(dir string) error {
	return removeIn(dir, IsTemp)
}

// RemoveTempsOf deletes the temporary files interrupted writes of path
// left behind, and no other.
func RemoveTempsOf(path string) error {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	prefix := tempPrefix(base)
	return removeIn(dir, func(name string) bool { return strings.HasPrefix(name, prefix) })
}

// removeIn deletes the regular files in dir whose names match; a
// directory or file that is gone already is no error.
func removeIn(dir string, match func(name string) bool) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		if os.IsNotExist(err) {
			return nil
		}
		return err
	}
	for _, e := range entries {
		if match(e.Name()) && e.Type().IsRegular() {
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil && !os.IsNotExist(err) {
				return err
			}
		}
	}
	return nil
}

// Checker is state that can tell, once decoded, whether it makes sense.
type Checker interface{ Check() error }

// ReadJSON reads path, as Write left it, into v. found is false when there
// is no file yet; its directory is then made (0700) so the first Write
// succeeds. A file that is not JSON of v's shape, or whose content v's
// Check refuses (when v is a Checker), is an error that matches
// ErrCorrupt.
func ReadJSON(path string, v any) (found bool, err error) {
	RemoveTempsOf(path) // a leftover is harmless; a failure here is not the caller's
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, os.MkdirAll(filepath.Dir(path), 0o700)
	}
	if err != nil {
		return false, err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return true, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	if c, ok := v.(Checker); ok {
		if err := c.Check(); err != nil {
			return true, &corruptError{err}
		}
	}
	return true, nil
}

// ReadState is ReadJSON for a component's state file, what it is called
// in errors ("port state"): a file that cannot be read is "read <what>:
// ...", and a corrupt one is the error corrupt makes of its path and
// why, which says what to do about it.
func ReadState[T any](path, what string, corrupt func(path, why string) error) (st T, found bool, err error) {
	found, err = ReadJSON(path, &st)
	switch {
	case errors.Is(err, ErrCorrupt):
		return st, true, corrupt(path, err.Error())
	case err != nil:
		return st, false, fmt.Errorf("read %s: %w", what, err)
	}
	return st, found, nil
}

// corruptError is content that decodes but makes no sense: it says why,
// and matches ErrCorrupt.
type corruptError struct{ err error }

func (e *corruptError) Error() string        { return e.err.Error() }
func (e *corruptError) Is(target error) bool { return target == ErrCorrupt }
func (e *corruptError) Unwrap() error        { return e.err }

// ErrCorrupt marks a state file that cannot be decoded.
var ErrCorrupt = errors.New("not valid JSON")
