package postgres

import (
	"testing"

	"github.com/nodemgr/nodemgr/internal/coordinator/store/storetest"
)

// BenchmarkNodeReadsBlob: see storetest.BenchNodeReadsBlob.
func BenchmarkNodeReadsBlob(b *testing.B) {
	storetest.BenchNodeReadsBlob(b, open(b, newDatabase(b)))
}

// BenchmarkAddTasksWithInputs: see storetest.BenchAddTasksWithInputs.
func BenchmarkAddTasksWithInputs(b *testing.B) {
	for _, indexed := range []bool{false, true} {
		name := map[bool]string{false: "unindexed", true: "indexed"}[indexed]
		b.Run(name, func(b *testing.B) {
			s := open(b, newDatabase(b))
			if !indexed {
				if _, err := s.pool.Exec(b.Context(), `DROP TRIGGER task_files_added ON tasks`); err != nil {
					b.Fatal(err)
				}
			}
			storetest.BenchAddTasksWithInputs(b, s)
		})
	}
}

// TestTaskFilesGoWithTheirTasks: as the SQLite store's.
func TestTaskFilesGoWithTheirTasks(t *testing.T) {
	ctx := t.Context()
	s := open(t, newDatabase(t))
	storetest.LoadHeldInputs(t, s)
	count := func() (n int) {
		t.Helper()
		if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM task_files`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := count(); n != 2000*50+32*1000 {
		t.Fatalf("%d task files, want %d", n, 2000*50+32*1000)
	}
	if _, err := s.pool.Exec(ctx, `DELETE FROM suites WHERE id = 'crowd'`); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 32*1000 {
		t.Errorf("%d task files after deleting suite crowd, want %d", n, 32*1000)
	}
}
