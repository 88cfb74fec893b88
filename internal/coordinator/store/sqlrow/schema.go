package sqlrow

import (
	"context"
	"log/slog"
	"time"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
)

// CheckSchemaVersion refuses a database that a newer nodemgr migrated
// further than this binary can: applied is the newest migration the
// database records, known the newest this binary has. Run on such a
// schema, the binary's statements would meet tables it does not know, and
// no migration of its own could bring the schema back to its version.
// The refusal is an errdefs.ErrConflict that says what to do.
func CheckSchemaVersion(applied, known int64) error {
	if applied <= known {
		return nil
	}
	return errdefs.Conflict("the store is at migration %d, this binary knows up to %d; upgrade nodemgr or restore a backup", applied, known)
}

// Migrated is one migration a run applied.
type Migrated struct {
	Version  int64
	Duration time.Duration
}

// LogMigrated says what a migration run did: a line per migration for a
// store it brought up to date, and for one it made from nothing a single
// line, the migrations at debug level (a newcomer's first start is not
// 27 lines of versions).
func LogMigrated(logger *slog.Logger, done []Migrated) {
	if len(done) == 0 {
		return
	}
	level, took := slog.LevelInfo, time.Duration(0)
	created := done[0].Version == 1
	if created {
		level = slog.LevelDebug
	}
	for _, m := range done {
		logger.Log(context.Background(), level, "store migrated", "version", m.Version, "duration", m.Duration)
		took += m.Duration
	}
	if created {
		logger.Info("store created", "schema_version", done[len(done)-1].Version, "duration", took)
	}
}
