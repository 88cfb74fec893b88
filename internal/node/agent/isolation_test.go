package agent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/node/runas"
)

// blobServer is the server's blob API for the files a test names: GETs
// are counted, PUTs recorded.
type blobServer struct {
	*httptest.Server
	mu    sync.Mutex
	blobs map[string][]byte // digest → content
	gets  map[string]int
	puts  []string
}

func newBlobServer(t *testing.T, contents ...string) (*blobServer, []string) {
	b := &blobServer{blobs: map[string][]byte{}, gets: map[string]int{}}
	var digests []string
	for _, c := range contents {
		sum := sha256.Sum256([]byte(c))
		d := "sha256:" + hex.EncodeToString(sum[:])
		b.blobs[d] = []byte(c)
		digests = append(digests, d)
	}
	b.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d := strings.TrimPrefix(r.URL.Path, "/v1/blobs/")
		b.mu.Lock()
		defer b.mu.Unlock()
		switch r.Method {
		case http.MethodGet:
			b.gets[d]++
			w.Write(b.blobs[d])
		case http.MethodHead:
			http.NotFound(w, r)
		case http.MethodPut:
			body, _ := io.ReadAll(r.Body)
			b.blobs[d] = body
			b.puts = append(b.puts, d)
			w.WriteHeader(http.StatusCreated)
		}
	}))
	t.Cleanup(b.Close)
	return b, digests
}

func (b *blobServer) client(t *testing.T, dataDir string) *blobClient {
	return newBlobClient(func() string { return b.URL }, func() string { return "cred" }, b.Client(), dataDir, 1<<30)
}

func (b *blobServer) getsOf(d string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.gets[d]
}

func (b *blobServer) putCount() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.puts)
}

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to run code as another user")
	}
}

// passableTempDir is a temp dir that any user may pass through (its
// parents too), as an agent's data dir is where it switches users.
func passableTempDir(t *testing.T) string {
	dir := t.TempDir()
	for d := dir; d != "/"; d = filepath.Dir(d) {
		if fi, err := os.Stat(d); err == nil && fi.Mode().Perm()&0o001 == 0 {
			os.Chmod(d, fi.Mode().Perm()|0o011)
		}
	}
	return dir
}

// runAs runs sh -c script in dir as u (nil: this process's user) and
// returns its output and whether it exited 0.
func runAs(t *testing.T, u *runas.User, dir, script string) (string, bool) {
	t.Helper()
	cmd := exec.Command("sh", "-c", script)
	cmd.Dir = dir
	if u != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: u.Credential()}
	}
	out, err := cmd.CombinedOutput()
	return string(out), err == nil
}

var nobodyUser = runas.User{Name: "nobody", UID: 65534, GID: 65534}

// stageOne stages a task with one input, data.txt, and returns its
// sandbox.
func stageOne(t *testing.T, f *filesSource, id, digest string) string {
	t.Helper()
	task := api.Task{ID: id, Attempt: 1, TaskSpec: api.TaskSpec{Argv: []string{"true"},
		Inputs: []api.TaskFile{{Path: "data.txt", Digest: digest}}}}
	if err := f.stage(context.Background(), &task); err != nil {
		t.Fatalf("stage %s: %v", id, err)
	}
	return task.Workdir
}

// TestInputsAreImmutableToTasks: a task cannot change what the next task
// given the same input gets. As another user it can neither write its
// input (a link to the cache's read-only file, not its own) nor make it
// writable; as the agent's own user it writes a copy of its own. (Issue
// 26: `echo X > data.txt` in one task changed the cached copy, and the
// next task given that digest read X.)
func TestInputsAreImmutableToTasks(t *testing.T) {
	needRoot(t)
	for _, tc := range []struct {
		name      string
		as        *runas.User
		mayWrite  bool // its own copy
		wantLinks bool
	}{
		{"as another user", &nobodyUser, false, true},
		{"as the agent's user", nil, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, digests := newBlobServer(t, "the submitted data\n")
			dataDir, workDir := t.TempDir(), passableTempDir(t)
			blobs := srv.client(t, dataDir)
			f, err := newFilesSource(&recordSource{}, blobs, workDir, tc.as, make(chan struct{}), slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			defer f.drain()
			first := stageOne(t, f, "k-1", digests[0])
			out, ok := runAs(t, tc.as, first, `echo X > data.txt || exit 1; chmod u+w data.txt || exit 1; echo X > data.txt`)
			if ok != tc.mayWrite {
				t.Errorf("a task writing its input: ok %v, want %v; output:\n%s", ok, tc.mayWrite, out)
			}
			fi, err := os.Stat(filepath.Join(first, "data.txt"))
			if err != nil {
				t.Fatal(err)
			}
			if st := fi.Sys().(*syscall.Stat_t); (st.Nlink > 1) != tc.wantLinks || st.Uid != 0 {
				t.Errorf("staged input: %d links, uid %d; want linked to the cache %v, the agent's", st.Nlink, st.Uid, tc.wantLinks)
			}
			second := stageOne(t, f, "k-2", digests[0])
			if got, _ := os.ReadFile(filepath.Join(second, "data.txt")); string(got) != "the submitted data\n" {
				t.Errorf("the next task's input = %q, want what was submitted", got)
			}
			if got, _ := os.ReadFile(blobs.cachePath(digests[0])); string(got) != "the submitted data\n" {
				t.Errorf("the cached copy = %q, want what was submitted", got)
			}
			if n := srv.getsOf(digests[0]); n != 1 {
				t.Errorf("the input was fetched %d times, want once: the cache was not changed", n)
			}
		})
	}
}

// TestPoisonedCacheIsFetchedAgain: a cached file changed behind the
// agent's back (by root, writing the cache directly) is found out before
// its next use and fetched again: at once where its size or mtime
// changed, at the next full hash (verifyEvery, or an agent start) where
// even those were put back.
func TestPoisonedCacheIsFetchedAgain(t *testing.T) {
	const good = "int x = 1;\n"
	tests := []struct {
		name        string
		poison      func(path string)
		verifyEvery time.Duration
		restart     bool // a new blobClient, as after an agent restart
	}{
		{"new content", func(p string) { os.WriteFile(p, []byte("evil\n"), 0o444) }, time.Hour, false},
		{"same size, new mtime", func(p string) {
			os.WriteFile(p, []byte(strings.Repeat("X", len(good))), 0o444)
			os.Chtimes(p, time.Time{}, time.Now().Add(time.Minute))
		}, time.Hour, false},
		{"same size and mtime, at the next full hash", sameSizeAndMtime(good), 0, false},
		{"same size and mtime, after a restart", sameSizeAndMtime(good), time.Hour, true},
		{"replaced by a link", func(p string) {
			evil := filepath.Join(filepath.Dir(p), "evil")
			os.WriteFile(evil, []byte(good), 0o444)
			os.Remove(p)
			os.Symlink(evil, p)
		}, time.Hour, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv, digests := newBlobServer(t, good)
			dataDir := t.TempDir()
			c := srv.client(t, dataDir)
			c.verifyEvery = tc.verifyEvery
			ctx := context.Background()
			p, err := c.cached(ctx, digests[0])
			if err != nil {
				t.Fatal(err)
			}
			tc.poison(p)
			if tc.restart {
				c = srv.client(t, dataDir)
			}
			p, err = c.cached(ctx, digests[0])
			if err != nil {
				t.Fatal(err)
			}
			fi, _ := os.Lstat(p)
			if got, _ := os.ReadFile(p); string(got) != good || !fi.Mode().IsRegular() {
				t.Errorf("after the cache was poisoned (%s), the next use got %q (%v), want %q", tc.name, got, fi.Mode(), good)
			}
			if n := srv.getsOf(digests[0]); n != 2 {
				t.Errorf("fetched %d times, want twice: once at first, once after the poisoning", n)
			}
		})
	}
}

// sameSizeAndMtime writes other content of the same size and puts the
// mtime back: only a hash tells.
func sameSizeAndMtime(good string) func(string) {
	return func(p string) {
		fi, _ := os.Stat(p)
		os.WriteFile(p, []byte(strings.Repeat("X", len(good))), 0o444)
		os.Chtimes(p, time.Time{}, fi.ModTime())
	}
}

// TestOutputsStayInTheSandbox: a task that links a directory of the
// agent's (or anything outside) into its sandbox and names it in its
// output globs uploads nothing from there. (Issue 26: out -> /etc with
// out/* uploaded the node's files.)
func TestOutputsStayInTheSandbox(t *testing.T) {
	outside := t.TempDir()
	os.WriteFile(filepath.Join(outside, "agent.json"), []byte(`{"credential":"nmn_secret"}`), 0o600)
	srv, _ := newBlobServer(t)
	inner := &recordSource{}
	f, err := newFilesSource(inner, srv.client(t, t.TempDir()), t.TempDir(), nil, make(chan struct{}), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	task := api.Task{ID: "k-1", Attempt: 1, TaskSpec: api.TaskSpec{Argv: []string{"true"}, Outputs: []string{"out/*", "out", "cred", "result.txt"}}}
	if err := f.stage(context.Background(), &task); err != nil {
		t.Fatal(err)
	}
	os.Symlink(outside, filepath.Join(task.Workdir, "out"))
	os.Symlink(filepath.Join(outside, "agent.json"), filepath.Join(task.Workdir, "cred"))
	os.WriteFile(filepath.Join(task.Workdir, "result.txt"), []byte("42\n"), 0o644)
	f.Report(api.TaskReport{TaskID: "k-1", Attempt: 1, Outcome: api.OutcomeSucceeded})
	f.drain()
	r := inner.reports[0]
	if r.Outcome != api.OutcomeSucceeded || len(r.Result.Outputs) != 1 || r.Result.Outputs[0].Path != "result.txt" {
		t.Errorf("report = %+v; want a success with result.txt alone", r)
	}
	if want := []string{"out/*", "out", "cred"}; fmt.Sprint(r.Result.Missing) != fmt.Sprint(want) {
		t.Errorf("missing = %q, want %q", r.Result.Missing, want)
	}
	srv.mu.Lock()
	defer srv.mu.Unlock()
	for _, d := range srv.puts {
		if strings.Contains(string(srv.blobs[d]), "nmn_secret") {
			t.Errorf("a file from outside the sandbox was uploaded: %q", srv.blobs[d])
		}
	}
}

// TestTooManyOutputsFailTheAttempt: globs that match more files than an
// attempt may return fail it, naming the cap and what to do, and upload
// nothing.
func TestTooManyOutputsFailTheAttempt(t *testing.T) {
	srv, _ := newBlobServer(t)
	inner := &recordSource{}
	f, err := newFilesSource(inner, srv.client(t, t.TempDir()), t.TempDir(), nil, make(chan struct{}), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	task := api.Task{ID: "k-1", Attempt: 1, TaskSpec: api.TaskSpec{Argv: []string{"true"}, Outputs: []string{"frames/*"}}}
	if err := f.stage(context.Background(), &task); err != nil {
		t.Fatal(err)
	}
	os.Mkdir(filepath.Join(task.Workdir, "frames"), 0o755)
	for i := range api.MaxTaskOutputFiles + 1 {
		os.WriteFile(filepath.Join(task.Workdir, "frames", fmt.Sprintf("%04d.png", i)), []byte{byte(i)}, 0o644)
	}
	f.Report(api.TaskReport{TaskID: "k-1", Attempt: 1, Outcome: api.OutcomeSucceeded})
	f.drain()
	r := inner.reports[0]
	want := fmt.Sprintf("more than %d files", api.MaxTaskOutputFiles)
	if r.Outcome != api.OutcomeFailed || !strings.Contains(r.Reason, want) || !strings.Contains(r.Result.Stderr, want) || len(r.Result.Outputs) != 0 {
		t.Errorf("report = %+v; want a failure saying %q, with no outputs", r.Reason, want)
	}
	if n := srv.putCount(); n != 0 {
		t.Errorf("%d files uploaded, want none", n)
	}
}

// TestSandboxIsTheTaskUsers: the task's user owns its sandbox's
// directories (it makes its outputs there); the inputs stay the agent's.
func TestSandboxIsTheTaskUsers(t *testing.T) {
	needRoot(t)
	srv, digests := newBlobServer(t, "x")
	workDir := passableTempDir(t)
	f, err := newFilesSource(&recordSource{}, srv.client(t, t.TempDir()), workDir, &nobodyUser, make(chan struct{}), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer f.drain()
	task := api.Task{ID: "k-1", Attempt: 1, TaskSpec: api.TaskSpec{Argv: []string{"true"}, Workdir: "build/obj",
		Inputs: []api.TaskFile{{Path: "src/a/x.c", Digest: digests[0]}}}}
	if err := f.stage(context.Background(), &task); err != nil {
		t.Fatal(err)
	}
	box := filepath.Dir(filepath.Dir(task.Workdir))
	for _, tc := range []struct {
		path string
		uid  uint32
	}{
		{filepath.Join(workDir, "sandbox"), 0}, {box, 65534}, {filepath.Join(box, "src", "a"), 65534},
		{task.Workdir, 65534}, {filepath.Join(box, "src", "a", "x.c"), 0},
	} {
		fi, err := os.Lstat(tc.path)
		if err != nil {
			t.Fatal(err)
		}
		if st := fi.Sys().(*syscall.Stat_t); st.Uid != tc.uid {
			t.Errorf("%s is uid %d's, want %d's", tc.path, st.Uid, tc.uid)
		}
	}
	if out, ok := runAs(t, &nobodyUser, task.Workdir, "echo built > x.o && cat ../../src/a/x.c"); !ok || out != "x" {
		t.Errorf("the task in its sandbox: %q, ok %v; want it to write its workdir and read its input", out, ok)
	}
}

// TestHooksRunAsTheSuitesUser: a suite's hooks run as its user, in its
// work dir, and cannot read the agent's files; a link the suite's code
// left where the agent writes the hook's log does not make the agent
// write (or report) the file it points to.
func TestHooksRunAsTheSuitesUser(t *testing.T) {
	needRoot(t)
	dataDir := passableTempDir(t)
	secret := filepath.Join(dataDir, "agent.json")
	os.WriteFile(secret, []byte(`{"credential":"nmn_secret"}`), 0o600)
	workDir := filepath.Join(dataDir, "suites", "s-1")
	a := &Agent{log: slog.New(slog.DiscardHandler), cfg: Config{DataDir: dataDir, Prefix: dataDir},
		users: runas.Policy{Self: runas.User{Name: "root"}, Switch: true, Default: nobodyUser}}
	// What an agent that ran suites as itself left there.
	os.MkdirAll(filepath.Join(workDir, "data"), 0o755)
	os.WriteFile(filepath.Join(workDir, "data", "old.txt"), nil, 0o644)
	if err := a.giveWorkDir(workDir, &nobodyUser); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(workDir, "data", "old.txt")); err != nil || fi.Sys().(*syscall.Stat_t).Uid != 65534 {
		t.Errorf("what was in the work dir before: %v; want it given to the suite's user", err)
	}
	// What an earlier run of the suite's code could have left.
	os.Symlink(secret, filepath.Join(workDir, "prepare.log"))
	r := newRunner(a)
	su := api.Suite{ID: "s-1", SuiteSpec: api.SuiteSpec{Name: "iso"}}
	hook := &api.Hook{Command: []string{"sh", "-c", `id -u; echo $HOME; cat "$SECRET" 2>/dev/null || echo refused; touch made-here; exit 3`},
		Env: map[string]string{"SECRET": secret}}
	err := r.runHook(context.Background(), su, workDir, "prepare", hook, &nobodyUser)
	p := problemOf(api.StagePrepare, err)
	if want := "65534\n" + workDir + "\nrefused\n"; !strings.Contains(p.OutputTail, want) || strings.Contains(p.OutputTail, "nmn_secret") {
		t.Errorf("the hook's output = %q; want it to run as 65534 with HOME its work dir, refused the agent's file", p.OutputTail)
	}
	if b, _ := os.ReadFile(secret); string(b) != `{"credential":"nmn_secret"}` {
		t.Errorf("the agent's file was written through the link: %q", b)
	}
	if fi, err := os.Stat(filepath.Join(workDir, "made-here")); err != nil || fi.Sys().(*syscall.Stat_t).Uid != 65534 {
		t.Errorf("the hook's file in its work dir: %v; want it made, by 65534", err)
	}
	a.takeWorkDir(workDir, &nobodyUser)
	if _, ok := runAs(t, &nobodyUser, "/", "ls "+workDir); ok {
		t.Errorf("the suite's user may still enter its work dir after the suite left")
	}
}
