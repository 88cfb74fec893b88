package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
)

// Backup copies the database at path to the new file to, consistent as of
// one moment, while a server keeps serving from it (VACUUM INTO reads one
// snapshot; WAL lets the server write meanwhile). The copy is compact,
// private (0600: it holds token hashes), and appears whole or not at all.
// Restore by putting it back as the data dir's nodemgr.db while the
// server is stopped.
func Backup(ctx context.Context, path, to string) error {
	if _, err := os.Stat(path); err != nil {
		return fmt.Errorf("back up %s: %w", path, err)
	}
	if _, err := os.Stat(to); err == nil {
		return fmt.Errorf("back up to %s: it exists; name a new file (a backup never overwrites one)", to)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("back up to %s: %w", to, err)
	}
	partial := to + ".partial"
	os.Remove(partial) // left by a backup that was cut off
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", busyTimeout.Milliseconds()))
	db, err := sql.Open("sqlite", "file:"+(&url.URL{Path: path}).EscapedPath()+"?"+q.Encode())
	if err != nil {
		return fmt.Errorf("back up %s: %w", path, err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, `VACUUM INTO ?`, partial); err != nil {
		os.Remove(partial)
		return fmt.Errorf("back up %s: %w", path, classify(err))
	}
	if err := os.Chmod(partial, 0o600); err != nil {
		os.Remove(partial)
		return fmt.Errorf("back up to %s: %w", to, err)
	}
	if err := os.Rename(partial, to); err != nil {
		os.Remove(partial)
		return fmt.Errorf("back up to %s: %w", to, err)
	}
	return nil
}
