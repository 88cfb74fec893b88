package sqlrow

import "github.com/nodemgr/nodemgr/internal/base/errdefs"

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
