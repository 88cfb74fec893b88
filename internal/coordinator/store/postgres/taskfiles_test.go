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

// TestTaskFilesGoWithTheirTasks: see storetest.TaskFilesGoWithTheirTasks.
func TestTaskFilesGoWithTheirTasks(t *testing.T) {
	url := newDatabase(t)
	storetest.TaskFilesGoWithTheirTasks(t, open(t, url), sqlDB(t, url))
}
