package sqlite

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/nodemgr/nodemgr/internal/coordinator/store/sqlstore"
	"github.com/nodemgr/nodemgr/internal/coordinator/store/storetest"
)

// TestTaskFilePlans pins how SQLite authorizes a blob: from the node's
// Running tasks to task_files' primary key (never from the digest's side,
// where a popular digest has as many rows as tasks name it), and by
// blob_groups' primary key.
func TestTaskFilePlans(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "nodemgr.db"), nil)
	tests := []struct {
		name, query string
		want        []string
	}{
		{"node reads blob", nodeReadsBlob, []string{
			"SCAN CONSTANT ROW",
			"SCALAR SUBQUERY 1",
			"SEARCH t USING COVERING INDEX tasks_running (node_id=?)",
			"SEARCH f USING PRIMARY KEY (task_seq=? AND kind=? AND digest=?)",
			"SCALAR SUBQUERY 2",
			"SEARCH t USING INDEX tasks_running (node_id=?)",
			"SEARCH d USING COVERING INDEX task_deps_task (task_id=?)",
			"SEARCH a USING COVERING INDEX sqlite_autoindex_tasks_1 (id=?)",
			"SEARCH f USING PRIMARY KEY (task_seq=? AND kind=? AND digest=?)",
		}},
		{"node blob scope", rebind(sqlstore.NodeBlobScopeSQL), []string{
			"SCAN CONSTANT ROW",
			"SCALAR SUBQUERY 1",
			"SEARCH tasks USING COVERING INDEX tasks_running (node_id=?)",
			"SCALAR SUBQUERY 3",
			"SEARCH blob_groups USING PRIMARY KEY (digest=? AND grp=?)",
			"LIST SUBQUERY 2",
			"SEARCH t USING INDEX tasks_running (node_id=?)",
			"SEARCH su USING INDEX sqlite_autoindex_suites_1 (id=?)",
		}},
		{"blob in groups", rebind(sqlstore.BlobInGroupsSQL("($2, $2)")), []string{
			"SCAN CONSTANT ROW",
			"SCALAR SUBQUERY 1",
			"SEARCH blob_groups USING PRIMARY KEY (digest=? AND grp=?)",
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			checkPlan(t, s.r, tc.query, tc.want, "n1", "[]")
		})
	}
}

// TestUpgradeIndexesTaskFiles opens a file made by schema 19, with tasks
// that have inputs and outputs, and finds their files indexed: a node
// holding one reads its inputs, and collection keeps them all.
func TestUpgradeIndexesTaskFiles(t *testing.T) {
	ctx := t.Context()
	path, db := migratedTo(t, 19)
	digest := func(s string) string {
		sum := sha256.Sum256([]byte(s))
		return "sha256:" + hex.EncodeToString(sum[:])
	}
	in, out := digest("in"), digest("out")
	for _, q := range []string{
		`INSERT INTO suites (id, name, group_name, spec, state, created_at, updated_at) VALUES ('s1', 'build', 'a', '{"name": "build", "group": "a"}', 'Open', 1, 1)`,
		fmt.Sprintf(`INSERT INTO tasks (id, suite_id, spec, state, attempt, node_id, created_at, updated_at)
			VALUES ('k1', 's1', '{"argv": ["cc"], "inputs": [{"path": "a.c", "digest": %q, "size": 1}]}', 'Running', 1, 'n1', 1, 1)`, in),
		fmt.Sprintf(`INSERT INTO tasks (id, suite_id, spec, state, attempt, node_id, result, created_at, updated_at)
			VALUES ('k0', 's1', '{"argv": ["gen"]}', 'Finished', 1, 'n1', '{"exit_code": 0, "outputs": [{"path": "a.o", "digest": %q, "size": 1}]}', 1, 1)`, out),
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("at version 19: %s: %v", q, err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	s := open(t, path, nil)
	if ok, err := s.NodeReadsBlob(ctx, "n1", in); err != nil || !ok {
		t.Errorf("NodeReadsBlob(n1, in) after upgrade = %v, %v, want true, nil", ok, err)
	}
	// What tasks named counts as uploaded for their groups.
	if ok, err := s.BlobInGroups(ctx, out, []string{"a"}); err != nil || !ok {
		t.Errorf("BlobInGroups(out, [a]) after upgrade = %v, %v, want true, nil", ok, err)
	}
	used, err := s.BlobsInUse(ctx)
	if err != nil || !used[in] || !used[out] || len(used) != 2 {
		t.Errorf("BlobsInUse() after upgrade = %v, %v, want in and out", used, err)
	}
}

// BenchmarkNodeReadsBlob: see storetest.BenchNodeReadsBlob.
//
//	go test -run '^$' -bench NodeReadsBlob ./internal/coordinator/store/sqlite ./internal/coordinator/store/postgres
func BenchmarkNodeReadsBlob(b *testing.B) {
	s, err := Open(b.Context(), filepath.Join(b.TempDir(), "nodemgr.db"), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	storetest.BenchNodeReadsBlob(b, s)
}

// BenchmarkAddTasksWithInputs: see storetest.BenchAddTasksWithInputs.
//
//	go test -run '^$' -bench AddTasksWithInputs ./internal/coordinator/store/sqlite ./internal/coordinator/store/postgres
func BenchmarkAddTasksWithInputs(b *testing.B) {
	for _, indexed := range []bool{false, true} {
		name := map[bool]string{false: "unindexed", true: "indexed"}[indexed]
		b.Run(name, func(b *testing.B) {
			s, err := Open(b.Context(), filepath.Join(b.TempDir(), "nodemgr.db"), nil)
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			if !indexed {
				if _, err := s.w.ExecContext(b.Context(), `DROP TRIGGER task_files_added`); err != nil {
					b.Fatal(err)
				}
			}
			storetest.BenchAddTasksWithInputs(b, s)
		})
	}
}

// TestTaskFilesGoWithTheirTasks: see storetest.TaskFilesGoWithTheirTasks.
func TestTaskFilesGoWithTheirTasks(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "nodemgr.db"), nil)
	storetest.TaskFilesGoWithTheirTasks(t, s, s.w)
}
