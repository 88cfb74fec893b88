package sqlite

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
)

// TestBackupWhileServing: a backup taken while the store is written holds
// what was committed before it, opens as a store of its own, is private,
// and never overwrites a file.
func TestBackupWhileServing(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "nodemgr.db")
	s := open(t, path, nil)
	ctx := t.Context()
	if err := s.CreateSuite(ctx, store.Suite{ID: "s1", Spec: api.SuiteSpec{Name: "kept"}}); err != nil {
		t.Fatal(err)
	}
	// Writes go on while the backup runs.
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			tasks := []store.Task{{ID: fmt.Sprintf("t%d", i), Spec: api.TaskSpec{Argv: []string{"true"}}}}
			if err := s.AddTasks(context.Background(), "s1", tasks); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	to := filepath.Join(dir, "backup.db")
	err := Backup(ctx, path, to)
	close(stop)
	<-done
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(to); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("backup file: %v, %v; want mode 0600", fi, err)
	}
	restored := open(t, to, nil)
	if su, err := restored.GetSuite(ctx, "s1"); err != nil || su.Spec.Name != "kept" {
		t.Errorf("the backup's suite s1 = %+v, %v; want it there", su, err)
	}
	if err := Backup(ctx, path, to); err == nil || !strings.Contains(err.Error(), "exists") {
		t.Errorf("a backup onto an existing file = %v, want it refused", err)
	}
}
