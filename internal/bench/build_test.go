package bench

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"testing"
)

var (
	buildOnce sync.Once
	builtBin  string
	buildErr  error
)

// nodemgrBinary builds the nodemgr binary once for all the harness tests.
func nodemgrBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the nodemgr binary; skipped with -short")
	}
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "nodemgr-bench-bin-")
		if err != nil {
			buildErr = err
			return
		}
		// The in-process workers are this binary, started as the suite's
		// unprivileged user when the tests run as root: it must pass.
		if err := os.Chmod(dir, 0o755); err != nil {
			buildErr = err
			return
		}
		builtBin = filepath.Join(dir, "nodemgr")
		build := exec.Command("go", "build", "-o", builtBin, "github.com/nodemgr/nodemgr/cmd/nodemgr")
		// Static, so the pool bench can deliver it into busybox machines.
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		build.Stderr = os.Stderr
		buildErr = build.Run()
	})
	if buildErr != nil {
		t.Fatalf("build nodemgr: %v", buildErr)
	}
	return builtBin
}

func TestMain(m *testing.M) {
	code := m.Run()
	if builtBin != "" {
		os.RemoveAll(filepath.Dir(builtBin))
	}
	os.Exit(code)
}

// TestBuild runs one round of bench build on tiny projects: the program
// built through nodemgr must run and print what make's prints (RunBuild
// checks it); the times are not judged.
func TestBuild(t *testing.T) {
	for _, tool := range []string{"make", "cc"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is needed to build the test programs: apt-get install make gcc", tool)
		}
	}
	bin := nodemgrBinary(t)
	for _, tc := range []struct {
		name    string
		project string
		units   int
	}{
		{name: "generated", units: 3},
		{name: "calc", project: "../e2e/testdata/calc"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := RunBuild(t.Context(), BuildConfig{Binary: bin, Project: tc.project, Units: tc.units, Rounds: 1, Agents: 2, Jobs: 2}, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			want := tc.units
			if tc.project != "" {
				want = 4
			}
			if r.CompileTasks != want || len(r.Rounds) != 1 {
				t.Fatalf("RunBuild = %d compile tasks, %d rounds; want %d, 1", r.CompileTasks, len(r.Rounds), want)
			}
			x := r.Rounds[0]
			if x.Make <= 0 || x.Nodemgr <= 0 || x.Ratio <= 0 {
				t.Errorf("round = make %v, nodemgr %v, ratio %v; want all positive", x.Make, x.Nodemgr, x.Ratio)
			}
			// The sources and headers differ from any round before, so
			// every one of them went up.
			if x.Uploaded != x.Inputs || x.Inputs != want+1 {
				t.Errorf("uploaded %d of %d inputs, want %d of %d", x.Uploaded, x.Inputs, want+1, want+1)
			}
			ran := 0
			for _, n := range x.PerAgent {
				ran += n
			}
			if len(x.PerAgent) != 2 || ran != want {
				t.Errorf("compiles per agent = %v, want %d in all on 2 agents", x.PerAgent, want)
			}
			if x.SameObjects != want {
				t.Errorf("%d of %d objects are byte-identical to make's, want all", x.SameObjects, want)
			}
		})
	}
}

// TestPlanBuildRefuses: a Makefile that does more than compile and link
// is not built, since nodemgr would not run the same build.
func TestPlanBuildRefuses(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Fatal("make is needed: apt-get install make")
	}
	for _, tc := range []struct{ name, makefile string }{
		{"extra step", "prog: a.o\n\tcc -o prog a.o\n\techo done\na.o: a.c\n\tcc -c a.c -o a.o\n"},
		{"no link", "a.o: a.c\n\tcc -c a.c -o a.o\n"},
		{"unknown object", "prog: a.o\n\tcc -o prog a.o b.o\na.o: a.c\n\tcc -c a.c -o a.o\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			files := map[string]string{"Makefile": tc.makefile, "a.c": "int a;\n"}
			if err := writeRound(dir, files, 0); err != nil {
				t.Fatal(err)
			}
			if p, err := planBuild(t.Context(), dir, files); err == nil {
				t.Errorf("planBuild(%q) = %+v, want an error", tc.makefile, p)
			}
		})
	}
}

func TestCommandArgv(t *testing.T) {
	for _, tc := range []struct {
		line string
		want []string
	}{
		{"cc -O2 -c a.c -o a.o", []string{"cc", "-O2", "-c", "a.c", "-o", "a.o"}},
		{"cc -o prog a.o -lm", []string{"cc", "-o", "prog", "a.o", "-lm"}},
		{`cc -DNAME='"x"' -c a.c -o a.o`, []string{"sh", "-c", `cc -DNAME='"x"' -c a.c -o a.o`}},
		{"cc -c $(pwd)/a.c -o a.o", []string{"sh", "-c", "cc -c $(pwd)/a.c -o a.o"}},
	} {
		if got := commandArgv(tc.line); !slices.Equal(got, tc.want) {
			t.Errorf("commandArgv(%q) = %q, want %q", tc.line, got, tc.want)
		}
	}
}

// TestAgentCPUsShareTheMachine: agents get disjoint runs of the CPUs that
// cover them all while there are enough, else one each, round robin; one
// agent is not pinned.
func TestAgentCPUsShareTheMachine(t *testing.T) {
	if _, err := exec.LookPath("taskset"); err != nil {
		t.Fatalf("taskset (util-linux) is not installed: %v", err)
	}
	for _, tc := range []struct {
		agents, cpus int
		want         []string
	}{
		{1, 2, nil},
		{2, 2, []string{"0", "1"}},
		{2, 4, []string{"0-1", "2-3"}},
		{3, 8, []string{"0-1", "2-4", "5-7"}},
		{4, 2, []string{"0", "1", "0", "1"}},
	} {
		got, err := agentCPUs(tc.agents, tc.cpus)
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("agentCPUs(%d agents, %d cpus) = %q, %v; want %q", tc.agents, tc.cpus, got, err, tc.want)
		}
	}
}
