package sqlite

import (
	"errors"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
)

// TestFullStore provokes SQLITE_FULL deterministically with max_page_count:
// writes that need a new page fail as errdefs.ErrStorageFull (and
// ErrUnavailable), the probe with them, reads and what was stored are
// unharmed, and writes work again once there is room.
func TestFullStore(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "nodemgr.db"), nil)
	ctx := t.Context()
	suite := func(id string) store.Suite {
		return store.Suite{ID: id, State: api.SuiteOpen, Spec: api.SuiteSpec{Name: id, Description: strings.Repeat("d", 3000),
			WorkerSchedule: api.WorkerSchedule{WorkerCount: 1}}}
	}
	if err := s.CreateSuite(ctx, suite("kept")); err != nil {
		t.Fatal(err)
	}
	// Free pages (of tables that migrations dropped) would take a write.
	if _, err := s.w.ExecContext(ctx, `VACUUM`); err != nil {
		t.Fatal(err)
	}
	var pages int
	if err := s.w.QueryRowContext(ctx, `PRAGMA page_count`).Scan(&pages); err != nil {
		t.Fatal(err)
	}
	setMax := func(n int) {
		t.Helper()
		if _, err := s.w.ExecContext(ctx, `PRAGMA max_page_count = `+itoa(n)); err != nil {
			t.Fatal(err)
		}
	}
	setMax(pages) // the file may not grow: every write that needs a page fails

	for name, err := range map[string]error{
		"CreateSuite": s.CreateSuite(ctx, suite("more")),
		"Probe":       s.Probe(ctx),
	} {
		if !errors.Is(err, errdefs.ErrStorageFull) || !errors.Is(err, errdefs.ErrUnavailable) {
			t.Errorf("%s on a full store = %v, want storage full (and unavailable)", name, err)
		}
		if got := errdefs.Code(err); got != "storage_full" {
			t.Errorf("Code(%s's error) = %q, want storage_full", name, got)
		}
	}
	if _, err := s.GetSuite(ctx, "kept"); err != nil {
		t.Errorf("GetSuite(kept) on a full store = %v, want it read", err)
	}

	setMax(1 << 30) // space freed
	if err := s.Probe(ctx); err != nil {
		t.Errorf("Probe after freeing = %v, want nil", err)
	}
	if err := s.CreateSuite(ctx, suite("more")); err != nil {
		t.Errorf("CreateSuite after freeing = %v, want nil", err)
	}
	got, err := s.ListSuites(ctx, store.SuiteFilter{})
	if err != nil || len(got) != 2 {
		t.Errorf("ListSuites after freeing = %d suites, %v; want kept and more", len(got), err)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
