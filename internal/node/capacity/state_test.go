package capacity

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/clocktest"
)

func TestStateSurvivesRestart(t *testing.T) {
	clk := clocktest.New()
	path := filepath.Join(t.TempDir(), "state", "capacity.json")
	cfg := Config{StatePath: path, Now: clk.Now}
	l := onboarded(t, cfg)
	a, err := l.Allocate(api.Allocation{Kind: api.AllocationService, Name: "web@1",
		Resources: api.Resources{CPUs: 1.25, MemoryMB: 512, GPUs: 1}, Ports: []int{20000}}, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.SetState(a.ID, "running"); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Commit("job-7", api.Resources{CPUs: 1}, []int{20001}, time.Hour); err != nil {
		t.Fatal(err)
	}
	before, err := l.Resources()
	if err != nil {
		t.Fatal(err)
	}

	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if mode := fi.Mode().Perm(); mode != 0o600 {
		t.Errorf("state file mode = %v, want 0600", mode)
	}

	again := newTest(t, cfg)
	after, err := again.Resources()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(before, after); diff != "" {
		t.Errorf("books after New on the same state (-before +after):\n%s", diff)
	}
	// The restored books refuse what the old ones would.
	if _, err := again.Allocate(api.Allocation{Kind: api.AllocationService, Name: "x", Ports: []int{20001}}, ""); err == nil {
		t.Errorf("restored books let a committed port be allocated")
	}
	if _, err := again.Allocate(pool("x", api.Resources{GPUs: 1}), ""); err != nil {
		t.Errorf("restored books: Allocate(1 GPU of 2, 1 held): %v", err)
	}
}

func TestCorruptState(t *testing.T) {
	for _, tc := range []struct {
		name, content, why string
	}{
		{"not json", "{nope", "invalid character"},
		{"truncated", `{"version":1,"allocations":[`, "unexpected end"},
		{"version", `{"version":9}`, "version is 9"},
		{"share", `{"version":1,"onboarding":{"onboarded":true,"share_percent":95}}`, "share_percent 95"},
		{"duplicate port", `{"version":1,"allocations":[
			{"id":"a","kind":"pool","name":"s","ports":[20000]},
			{"id":"b","kind":"pool","name":"t","ports":[20000]}]}`, "port 20000 is also held by allocations[0]"},
		{"duplicate id", `{"version":1,"commitments":[{"id":"c","owner":"o"}],"allocations":[{"id":"c","kind":"pool","name":"s"}]}`, "id c is listed twice"},
		{"gpu count", `{"version":1,"allocations":[{"id":"a","kind":"pool","name":"s","gpus":2,"gpu_indexes":[0]}]}`, "gpus is 2"},
		{"negative", `{"version":1,"allocations":[{"id":"a","kind":"pool","name":"s","memory_mb":-5}]}`, "memory_mb"},
		{"kind", `{"version":1,"allocations":[{"id":"a","kind":"vm","name":"s"}]}`, `kind "vm"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "capacity.json")
			if err := os.WriteFile(path, []byte(tc.content), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := New(Config{StatePath: path, Hardware: testHardware()})
			if err == nil {
				t.Fatalf("New on a corrupt state file succeeded")
			}
			for _, want := range []string{path, "corrupt", tc.why, "move it away"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("New = %q, want it to contain %q", err, want)
				}
			}
		})
	}
}

func TestNewCleansStaleTemps(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "capacity.json")
	stale := filepath.Join(dir, ".capacity.json.tmp-123") // as atomicfile.Write names them
	if err := os.WriteFile(stale, []byte("half"), 0o600); err != nil {
		t.Fatal(err)
	}
	newTest(t, Config{StatePath: path})
	if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stale temp file left behind: %v", err)
	}
}

// TestSaveFailureChangesNothing checks all-or-nothing down to the disk: a
// change that cannot be saved is not made.
func TestSaveFailureChangesNothing(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	l := onboarded(t, Config{StatePath: filepath.Join(dir, "capacity.json")})
	a, err := l.Allocate(pool("s1", api.Resources{CPUs: 1}), "")
	if err != nil {
		t.Fatal(err)
	}
	c, err := l.Commit("job", api.Resources{CPUs: 1}, []int{20000}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	before, _ := l.Resources()
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}

	checks := []struct {
		op  string
		err error
	}{
		{"Allocate", func() error { _, err := l.Allocate(pool("s2", api.Resources{CPUs: 1}), ""); return err }()},
		{"Allocate from commitment", func() error { _, err := l.Allocate(pool("s3", api.Resources{CPUs: 1}), c.ID); return err }()},
		{"Commit", func() error { _, err := l.Commit("job", api.Resources{CPUs: 1}, nil, time.Hour); return err }()},
		{"Free", l.Free(a.ID)},
		{"Release", l.Release(c.ID)},
		{"SetState", l.SetState(a.ID, "stopped")},
		{"Onboard", func() error { _, err := l.Onboard(60, 1); return err }()},
		{"Offboard", l.Offboard(true)},
	}
	for _, tc := range checks {
		if tc.err == nil || !strings.Contains(tc.err.Error(), "save the books") {
			t.Errorf("%s with the state dir gone = %v, want a save error", tc.op, tc.err)
		}
	}
	after, err := l.Resources()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(before, after); diff != "" {
		t.Errorf("failed changes changed the books (-before +after):\n%s", diff)
	}
	if err := checkInvariants(l); err != nil {
		t.Error(err)
	}
}
