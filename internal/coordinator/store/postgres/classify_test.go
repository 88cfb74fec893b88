package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
)

// TestClassify: PostgreSQL's errors get the classes the SQLite store gives
// its driver's equivalents.
func TestClassify(t *testing.T) {
	pg := func(code string) error { return fmt.Errorf("exec: %w", &pgconn.PgError{Code: code, Message: "m"}) }
	tests := []struct {
		name string
		err  error
		want error // nil: no class
	}{
		{"unique violation", pg("23505"), errdefs.ErrConflict},
		{"foreign key violation", pg("23503"), errdefs.ErrNotFound},
		{"disk full", pg("53100"), errdefs.ErrStorageFull},
		{"too many connections", pg("53300"), errdefs.ErrUnavailable},
		{"admin shutdown", pg("57P01"), errdefs.ErrUnavailable},
		{"cannot connect now", pg("57P03"), errdefs.ErrUnavailable},
		{"read-only standby", pg("25006"), errdefs.ErrUnavailable},
		{"deadlock after retries", pg("40P01"), errdefs.ErrUnavailable},
		{"NUL in text", pg("22021"), errdefs.ErrInvalid},
		{"syntax error", pg("42601"), nil},
		{"connection refused", &net.OpError{Op: "dial", Net: "unix", Err: errors.New("connection refused")}, errdefs.ErrUnavailable},
		{"cut mid-read", fmt.Errorf("read: %w", io.ErrUnexpectedEOF), errdefs.ErrUnavailable},
		{"closed connection", fmt.Errorf("query: %w", pgconn.ErrConnClosed), errdefs.ErrUnavailable},
		{"cancelled", context.Canceled, nil},
		{"classed already", errdefs.Conflict("taken"), errdefs.ErrConflict},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := classify(tc.err)
			if !errors.Is(got, tc.err) {
				t.Errorf("classify(%v) = %v, which does not wrap it", tc.err, got)
			}
			for _, class := range []error{errdefs.ErrConflict, errdefs.ErrNotFound, errdefs.ErrStorageFull, errdefs.ErrUnavailable, errdefs.ErrInvalid} {
				want := tc.want != nil && errors.Is(tc.want, class)
				if errors.Is(got, class) != want {
					t.Errorf("classify(%v) is %v: %v, want %v", tc.err, class, !want, want)
				}
			}
		})
	}
	if retryable(pg("40001")) != true || retryable(pg("40P01")) != true || retryable(pg("23505")) {
		t.Errorf("retryable: want serialization failures and deadlocks only")
	}
}
