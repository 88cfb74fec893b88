package sqlstore

import (
	"time"

	"github.com/nodemgr/nodemgr/internal/coordinator/store/sqlrow"
)

// Times are stored as unix nanoseconds; the zero time ("never") as NULL.

func timeOf(n *int64) time.Time {
	if n == nil {
		return time.Time{}
	}
	return sqlrow.FromNanos(*n)
}

// nullString stores an empty string as NULL, for optional foreign keys.
func nullString(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
