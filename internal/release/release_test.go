package release

import (
	"bytes"
	"context"
	"debug/elf"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// built is the release buildHere made, shared by the tests: a cold build
// of nodemgr takes minutes on a small machine.
var built struct {
	sync.Mutex
	o      Options
	a      Artifact
	agent  Artifact     // the agent-only build
	client Artifact     // the client build
	log    bytes.Buffer // Build's progress and the go tool's output
	err    error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if built.o.OutDir != "" {
		os.RemoveAll(built.o.OutDir)
	}
	os.Exit(code)
}

// buildHere builds a release (binary, agent-only binary and .deb) for
// this machine's architecture, once per test binary.
func buildHere(t *testing.T) (Options, Artifact) {
	t.Helper()
	if testing.Short() {
		t.Skip("builds nodemgr; skipped with -short")
	}
	built.Lock()
	defer built.Unlock()
	if built.o.OutDir == "" {
		dir, err := os.MkdirTemp("", "nodemgr-release-test-")
		if err != nil {
			t.Fatal(err)
		}
		built.o = Options{Version: "1.2.3+test", Commit: "0123456789abcdef", OutDir: dir, RepoDir: "../..",
			Maintainer: "Release Tester <release-tester@example.org>",
			Targets:    []Target{{"linux", runtime.GOARCH}}, Stderr: &built.log}
		var arts []Artifact
		if arts, built.err = Build(context.Background(), built.o); built.err == nil {
			built.a, built.agent, built.client = arts[0], arts[1], arts[2]
		}
	}
	if built.err != nil {
		t.Fatalf("%v\n%s", built.err, built.log.String())
	}
	return built.o, built.a
}

func TestBuildStampsVersionAndChecksums(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("runs the linux binary")
	}
	o, a := buildHere(t)
	out, err := exec.Command(a.Path, "--version").CombinedOutput()
	if err != nil {
		t.Fatalf("%s --version: %v\n%s", a.Path, err, out)
	}
	for _, want := range []string{"nodemgr version 1.2.3+test", "commit 0123456789abcdef", "linux/" + runtime.GOARCH} {
		if !strings.Contains(string(out), want) {
			t.Errorf("--version = %q, want it to hold %q", out, want)
		}
	}
	sums, err := os.ReadFile(filepath.Join(o.OutDir, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := fileSHA256(a.Path)
	if err != nil {
		t.Fatal(err)
	}
	if want := got + "  " + a.Target.Name() + "\n"; !strings.Contains(string(sums), want) {
		t.Errorf("SHA256SUMS = %q, want a line %q", sums, want)
	}
	if _, err := exec.LookPath("sha256sum"); err == nil {
		cmd := exec.Command("sha256sum", "-c", "SHA256SUMS")
		cmd.Dir = o.OutDir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("sha256sum -c SHA256SUMS: %v\n%s", err, out)
		}
	}
}

// TestChecksumsCoverEveryFile: every file Build wrote into the release
// directory (binaries, modules lists, packages, the agent-only builds) is
// in SHA256SUMS with its hash, and SHA256SUMS names nothing else.
func TestChecksumsCoverEveryFile(t *testing.T) {
	o, _ := buildHere(t)
	sums, err := os.ReadFile(filepath.Join(o.OutDir, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]string{}
	for _, line := range strings.Split(strings.TrimSuffix(string(sums), "\n"), "\n") {
		sum, name, ok := strings.Cut(line, "  ")
		if !ok {
			t.Fatalf("SHA256SUMS line %q is not HASH  NAME", line)
		}
		listed[name] = sum
	}
	onDisk := map[string]string{}
	err = filepath.WalkDir(o.OutDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		name, _ := filepath.Rel(o.OutDir, path)
		if name == "SHA256SUMS" {
			return nil
		}
		sum, err := fileSHA256(path)
		onDisk[filepath.ToSlash(name)] = sum
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(onDisk, listed); diff != "" {
		t.Errorf("SHA256SUMS (+) against the files in %s (-):\n%s", o.OutDir, diff)
	}
	if len(onDisk) < 5 {
		t.Errorf("the release holds %d files, want at least the binary, the agent-only binary, their modules and the .deb", len(onDisk))
	}
}

// TestBuildSaysProgress: Build says as each target's step starts and
// ends, with how long it took.
func TestBuildSaysProgress(t *testing.T) {
	_, a := buildHere(t)
	arch := "linux/" + a.Target.Arch
	for _, step := range []string{a.Target.Name(), AgentDir + "/" + a.Target.Name() + " (agent only)", "Debian package"} {
		for _, want := range []string{
			`(?m)^release: ` + regexp.QuoteMeta(arch+": "+step) + `: building$`,
			`(?m)^release: ` + regexp.QuoteMeta(arch+": "+step) + `: done in [0-9.hms]+$`,
		} {
			if !regexp.MustCompile(want).MatchString(built.log.String()) {
				t.Errorf("Build's output has no line matching %s:\n%s", want, built.log.String())
			}
		}
	}
}

// TestBuildAgentOnly: the release holds the agent-only build, under the
// name --agent-binaries DIR expects in agent/, stamped, checksummed, and
// with no server in it.
func TestBuildAgentOnly(t *testing.T) {
	a := checkSubBuild(t, func() Artifact { return built.agent }, AgentDir, "agent only")
	if err := exec.Command(a.Path, "help", "server").Run(); err == nil {
		t.Errorf("%s help server succeeded; the agent-only build has no server", a.Path)
	}
	if err := exec.Command(a.Path, "agent", "--help").Run(); err != nil {
		t.Errorf("%s agent --help: %v", a.Path, err)
	}
}

// TestBuildClientOnly: the release holds the client build in client/,
// stamped and checksummed: it runs client commands and has no server or
// agent in it.
func TestBuildClientOnly(t *testing.T) {
	a := checkSubBuild(t, func() Artifact { return built.client }, ClientDir, "client only")
	for _, daemon := range []string{"server", "agent", "dev"} {
		if err := exec.Command(a.Path, "help", daemon).Run(); err == nil {
			t.Errorf("%s help %s succeeded; the client build has no %s", a.Path, daemon, daemon)
		}
	}
	if out, err := exec.Command(a.Path, "exec", "--help").CombinedOutput(); err != nil || !strings.Contains(string(out), "local, docker, ssh, sftp or rsync") {
		t.Errorf("%s exec --help = %v; want the executors named from their records:\n%s", a.Path, err, out)
	}
}

// checkSubBuild checks what every build beside the whole binary must be:
// in dir, marked as that build, stamped with the version (its --version
// saying label), checksummed, and with its modules beside it. artifact
// gives the build once buildHere has made it.
func checkSubBuild(t *testing.T, artifact func() Artifact, dir, label string) Artifact {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("runs the linux binary")
	}
	o, _ := buildHere(t)
	a := artifact()
	marked := map[string]bool{AgentDir: a.AgentOnly && !a.ClientOnly, ClientDir: a.ClientOnly && !a.AgentOnly}[dir]
	if want := filepath.Join(o.OutDir, dir, a.Target.Name()); a.Path != want || !marked {
		t.Errorf("%s artifact %+v, want it marked as such at %s", label, a, want)
	}
	out, err := exec.Command(a.Path, "--version").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "nodemgr version 1.2.3+test") || !strings.Contains(string(out), label) {
		t.Errorf("%s --version = %q, %v; want version 1.2.3+test, %s", a.Path, out, err, label)
	}
	sums, err := os.ReadFile(filepath.Join(o.OutDir, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	if want := a.SHA256 + "  " + dir + "/" + a.Target.Name() + "\n"; !strings.Contains(string(sums), want) {
		t.Errorf("SHA256SUMS = %q, want a line %q", sums, want)
	}
	if _, err := os.Stat(a.Path + ".modules"); err != nil {
		t.Error(err)
	}
	return a
}

func TestBuildIsStaticWithModulesList(t *testing.T) {
	_, a := buildHere(t)
	f, err := elf.Open(a.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s has an ELF interpreter: it is not static", a.Path)
		}
	}
	out, err := exec.Command("go", "version", "-m", a.Path).Output()
	if err != nil {
		t.Fatalf("go version -m: %v", err)
	}
	if !strings.Contains(string(out), "CGO_ENABLED=0") {
		t.Errorf("go version -m %s does not say CGO_ENABLED=0:\n%s", a.Path, out)
	}
	mods, err := os.ReadFile(a.Path + ".modules")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"dep\tgithub.com/spf13/cobra\tv", "build\tCGO_ENABLED=0", "build\tGOARCH=" + runtime.GOARCH} {
		if !strings.Contains(string(mods), want) {
			t.Errorf("%s.modules does not hold %q", a.Target.Name(), want)
		}
	}
}

func TestOptionsCheck(t *testing.T) {
	const maint = "Jane Doe <jane@example.org>"
	for _, tc := range []struct {
		name, version, out, maintainer string
		noDeb                          bool
		ok                             bool
	}{
		{"plain", "1.2.0", "dist", maint, false, true},
		{"git describe", "1.2.0+3.gabc1234", "dist", maint, false, true},
		{"leading v", "v1.2.0", "dist", maint, false, false},
		{"empty", "", "dist", maint, false, false},
		{"underscore", "1.2_0", "dist", maint, false, false},
		{"no out dir", "1.2.0", "", maint, false, false},
		{"no maintainer", "1.2.0", "dist", "", false, false},
		{"maintainer without address", "1.2.0", "dist", "Jane Doe", false, false},
		{"maintainer address alone", "1.2.0", "dist", "<jane@example.org>", false, false},
		{"no maintainer, no deb", "1.2.0", "dist", "", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Options{Version: tc.version, OutDir: tc.out, Maintainer: tc.maintainer, NoDeb: tc.noDeb}.check()
			if (err == nil) != tc.ok {
				t.Errorf("check(%q, %q, %q) = %v, want ok %v", tc.version, tc.out, tc.maintainer, err, tc.ok)
			}
		})
	}
}
