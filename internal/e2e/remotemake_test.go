package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/coordinator/blob/blobtest"
)

// runIn runs a CLI command against s from dir ("": the test's own) and
// returns stdout, stderr and the exit code.
func (s *server) runIn(t *testing.T, dir string, args ...string) (string, string, int) {
	t.Helper()
	return s.runWith(t, dir, "", args...)
}

// copyProject copies testdata/calc into a fresh directory, with edits.
func copyProject(t *testing.T, edits map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	files, err := filepath.Glob("testdata/calc/*")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(f)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for name, text := range edits {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

var calcUnits = []string{"add", "mul", "power", "main"}

// submitBuild submits the calc program as one compile task per file and
// a link task after them, from the project's directory.
func submitBuild(t *testing.T, s *server, suite, dir string) {
	t.Helper()
	if _, errOut, code := s.run(t, "suite", "create", "-f", writeSuite(t, suite)); code != 0 {
		t.Fatalf("suite create: %s", errOut)
	}
	link := []string{"task", "submit", "--suite", suite, "--name", "link", "--output", "calc", "--final-exit-code", "1"}
	for _, u := range calcUnits {
		out, errOut, code := s.runIn(t, dir, "task", "submit", "--suite", suite, "--name", "cc-"+u,
			"--input", u+".c", "--input", "*.h", "--output", u+".o", "--final-exit-code", "1", "--label", "unit="+u,
			"--", "gcc", "-O2", "-c", u+".c", "-o", u+".o")
		if code != 0 {
			t.Fatalf("submit cc-%s: exit %d: %s%s", u, code, out, errOut)
		}
		link = append(link, "--after", "cc-"+u, "--input-from", "cc-"+u+":"+u+".o")
	}
	link = append(link, "--", "gcc", "-o", "calc", "add.o", "mul.o", "power.o", "main.o")
	if out, errOut, code := s.runIn(t, dir, link...); code != 0 {
		t.Fatalf("submit link: exit %d: %s%s", code, out, errOut)
	}
}

func writeSuite(t *testing.T, name string) string {
	t.Helper()
	// No worker_schedule: one worker per CPU of each node.
	p := filepath.Join(t.TempDir(), "suite.yaml")
	if err := os.WriteFile(p, []byte("name: "+name+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestRemoteMake builds a small C program as a suite on two agents that
// share no files with the submitter: the sources go up as inputs (the
// header once), the objects come back as outputs, a dependent task links
// them from its dependencies' outputs, and suite fetch brings the program
// home, where it runs.
func TestRemoteMake(t *testing.T) {
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Fatal("gcc is needed to build the test program: apt-get install gcc")
	}
	s := startServer(t)
	dir := copyProject(t, nil)
	submitBuild(t, s, "build", dir)
	// The agents start only once the project is gone: nothing but the
	// blob store can give them the sources.
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	startAgent(t, s, "m1")
	startAgent(t, s, "m2")

	if out, errOut, code := s.run(t, "suite", "wait", "build", "--timeout", "2m"); code != 0 {
		t.Fatalf("suite wait build: exit %d: %s%s", code, out, errOut)
	}
	tasks := allTasks(t, s, "build")
	for _, tk := range tasks {
		if tk.State != api.TaskFinished {
			t.Errorf("task %s (%s) is %s: %+v", tk.ID, tk.Name, tk.State, tk.Failures)
		}
	}
	// The header went up once: every compile task names the same blob.
	digests := map[string]bool{}
	for _, tk := range tasks {
		for _, in := range tk.Inputs {
			if in.Path == "calc.h" {
				digests[in.Digest] = true
			}
		}
	}
	if len(digests) != 1 {
		t.Errorf("calc.h is stored as %d blobs, want 1", len(digests))
	}

	home := t.TempDir()
	if out, errOut, code := s.run(t, "suite", "fetch", "build", "--dest", home); code != 0 {
		t.Fatalf("suite fetch: exit %d: %s%s", code, out, errOut)
	}
	for _, f := range []string{"add.o", "mul.o", "power.o", "main.o", "calc"} {
		if _, err := os.Stat(filepath.Join(home, f)); err != nil {
			t.Errorf("fetched %s: %v", f, err)
		}
	}
	got, err := exec.Command(filepath.Join(home, "calc"), "2", "10").CombinedOutput()
	if want := "2+10=12 2*10=20 2^10=1024\n"; err != nil || string(got) != want {
		t.Errorf("calc 2 10 = %q, %v; want %q", got, err, want)
	}

	// task get brings one task's outputs; task ls finds a task by name
	// and by label.
	one := t.TempDir()
	if out, errOut, code := s.run(t, "task", "get", taskNamed(t, tasks, "cc-mul").ID, "--dest", one); code != 0 {
		t.Fatalf("task get: exit %d: %s%s", code, out, errOut)
	}
	if _, err := os.Stat(filepath.Join(one, "mul.o")); err != nil {
		t.Errorf("task get cc-mul: %v", err)
	}
	if out, _, _ := s.run(t, "task", "ls", "--suite", "build", "--label", "unit=power"); !strings.Contains(out, "cc-power") || strings.Contains(out, "cc-mul") {
		t.Errorf("task ls --label unit=power =\n%s\nwant only cc-power", out)
	}
}

func taskNamed(t *testing.T, tasks []api.Task, name string) api.Task {
	t.Helper()
	for _, tk := range tasks {
		if tk.Name == name {
			return tk
		}
	}
	t.Fatalf("no task named %s", name)
	return api.Task{}
}

// TestRemoteMakeSyntaxError: a file that does not compile fails once (its
// exit code is final), the link task is cancelled with the reason, and
// suite wait exits non-zero.
func TestRemoteMakeSyntaxError(t *testing.T) {
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Fatal("gcc is needed to build the test program: apt-get install gcc")
	}
	s := startServer(t)
	startAgent(t, s, "m1")
	dir := copyProject(t, map[string]string{"mul.c": "#include \"calc.h\"\nlong mul(long a, long b) { return a * b }\n"})
	submitBuild(t, s, "broken", dir)

	out, errOut, code := s.run(t, "suite", "wait", "broken", "--timeout", "2m")
	if code == 0 {
		t.Fatalf("suite wait broken: exit 0, want non-zero (a task failed): %s", out)
	}
	if !strings.Contains(errOut, "1 task(s) failed") || !strings.Contains(errOut, "1 cancelled") {
		t.Errorf("suite wait said %q; want it to count 1 failed and 1 cancelled", errOut)
	}
	tasks := allTasks(t, s, "broken")
	mul := taskNamed(t, tasks, "cc-mul")
	if mul.State != api.TaskFailed || mul.Attempt != 1 {
		t.Errorf("cc-mul is %s after %d attempts, want Failed after 1 (exit 1 is final)", mul.State, mul.Attempt)
	}
	link := taskNamed(t, tasks, "link")
	if link.State != api.TaskCancelled || !strings.Contains(link.Reason, "cc-mul") {
		t.Errorf("link is %s (%q), want Cancelled with a reason naming cc-mul", link.State, link.Reason)
	}
	if link.Attempt != 0 {
		t.Errorf("link ran %d times, want never", link.Attempt)
	}
	for _, name := range []string{"cc-add", "cc-power", "cc-main"} {
		if tk := taskNamed(t, tasks, name); tk.State != api.TaskFinished {
			t.Errorf("%s is %s, want Finished", name, tk.State)
		}
	}
	// Closed with nothing left, it completes at once; watch fails too.
	if _, errOut, code := s.run(t, "suite", "close", "broken"); code != 0 {
		t.Fatalf("suite close: %s", errOut)
	}
	if _, errOut, code := s.run(t, "suite", "watch", "broken"); code == 0 || !strings.Contains(errOut, "failed") {
		t.Errorf("suite watch broken: exit %d, %q; want non-zero, saying a task failed", code, errOut)
	}
}

// TestRemoteMakeOnS3 keeps the task files in an S3 bucket (moto here), as
// several server replicas would share them: the build's inputs and outputs
// land in the bucket, and the fetched program runs.
func TestRemoteMakeOnS3(t *testing.T) {
	cfg := blobtest.MotoS3(t)
	s := startServer(t, "--blob-s3-bucket", cfg.Bucket, "--blob-s3-prefix", cfg.Prefix, "--blob-s3-region", cfg.Region,
		"--blob-s3-endpoint", cfg.Endpoint, "--blob-s3-path-style")
	startAgent(t, s, "m1")
	submitBuild(t, s, "s3build", copyProject(t, nil))
	if out, errOut, code := s.run(t, "suite", "wait", "s3build", "--timeout", "2m"); code != 0 {
		t.Fatalf("suite wait: exit %d: %s%s", code, out, errOut)
	}
	home := t.TempDir()
	if out, errOut, code := s.run(t, "suite", "fetch", "s3build", "--dest", home); code != 0 {
		t.Fatalf("suite fetch: exit %d: %s%s", code, out, errOut)
	}
	if got, err := exec.Command(filepath.Join(home, "calc")).CombinedOutput(); err != nil || string(got) != "3+4=7 3*4=12 3^4=81\n" {
		t.Errorf("calc = %q, %v", got, err)
	}
	list, err := blobtest.S3Client(t, cfg).ListObjectsV2(context.Background(), &s3.ListObjectsV2Input{Bucket: &cfg.Bucket, Prefix: &cfg.Prefix})
	if err != nil {
		t.Fatal(err)
	}
	// 4 sources and the header in, 4 objects and the program out.
	if n := len(list.Contents); n != 10 {
		t.Errorf("the bucket holds %d task files, want 10: 5 inputs, 5 outputs", n)
	}
}

// TestRemoteMakeSurvivesAnAgentKill: an agent killed with SIGKILL in the
// middle of a build loses nothing: the tasks it held run again on the
// other agent, from the files in the blob store, and the build completes
// with every object and a program that runs.
func TestRemoteMakeSurvivesAnAgentKill(t *testing.T) {
	s := startServer(t)
	dir := copyProject(t, nil)
	if _, errOut, code := s.run(t, "suite", "create", "-f", writeSuite(t, "slow")); code != 0 {
		t.Fatalf("suite create: %s", errOut)
	}
	link := []string{"task", "submit", "--suite", "slow", "--name", "link", "--output", "calc"}
	for _, u := range calcUnits {
		// Slow compiles, so the kill finds work running.
		if out, errOut, code := s.runIn(t, dir, "task", "submit", "--suite", "slow", "--name", "cc-"+u,
			"--input", u+".c", "--input", "calc.h", "--output", u+".o",
			"--", "sh", "-c", "sleep 1 && gcc -c "+u+".c -o "+u+".o"); code != 0 {
			t.Fatalf("submit cc-%s: %s%s", u, out, errOut)
		}
		link = append(link, "--after", "cc-"+u, "--input-from", "cc-"+u)
	}
	link = append(link, "--", "gcc", "-o", "calc", "add.o", "mul.o", "power.o", "main.o")
	if out, errOut, code := s.runIn(t, dir, link...); code != 0 {
		t.Fatalf("submit link: %s%s", out, errOut)
	}
	victim := startAgent(t, s, "victim")
	waitFor(t, 30*time.Second, "the victim runs a compile", func() (bool, string) {
		tasks := allTasks(t, s, "slow")
		for _, tk := range tasks {
			if tk.State == api.TaskRunning {
				return true, ""
			}
		}
		return false, fmt.Sprint(len(tasks), " tasks, none running")
	})
	victim.signal(syscall.SIGKILL)
	startAgent(t, s, "survivor")

	if out, errOut, code := s.run(t, "suite", "wait", "slow", "--timeout", "2m"); code != 0 {
		t.Fatalf("suite wait: exit %d: %s%s", code, out, errOut)
	}
	home := t.TempDir()
	if out, errOut, code := s.run(t, "suite", "fetch", "slow", "--dest", home); code != 0 {
		t.Fatalf("suite fetch: exit %d: %s%s", code, out, errOut)
	}
	if got, err := exec.Command(filepath.Join(home, "calc")).CombinedOutput(); err != nil || string(got) != "3+4=7 3*4=12 3^4=81\n" {
		t.Errorf("calc = %q, %v", got, err)
	}
	for _, tk := range allTasks(t, s, "slow") {
		if tk.State != api.TaskFinished || tk.Result == nil || len(tk.Result.Outputs) == 0 {
			t.Errorf("task %s is %s with outputs %v", tk.Name, tk.State, tk.Result)
		}
	}
}
