package server

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/coordinator/blob"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
)

func digestOf(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// rawCall sends body as it is.
func (ts *testServer) rawCall(t *testing.T, token, method, path string, body []byte) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, ts.http.URL+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := ts.http.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(raw)
}

// mustRaw is rawCall that fails the test unless the answer is want.
func (ts *testServer) mustRaw(t *testing.T, want int, token, method, path string, body []byte) string {
	t.Helper()
	code, got := ts.rawCall(t, token, method, path, body)
	if code != want {
		t.Fatalf("%s %s = %d %s, want %d", method, path, code, got, want)
	}
	return got
}

// TestBlobPutChecksTheDigest: a file is stored under the digest of its
// content only; a mismatch or a file over the cap is refused and stores
// nothing.
func TestBlobPutChecksTheDigest(t *testing.T) {
	s, _, admin := newServer(t, "", Config{BlobMaxSize: 16})
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	ts := &testServer{Server: s, http: hs, admin: admin}
	data := []byte("int x;\n")
	d := digestOf(data)
	if code, body := ts.rawCall(t, admin, "PUT", "/v1/blobs/"+digestOf([]byte("other")), data); code != http.StatusBadRequest {
		t.Errorf("PUT under another digest = %d %s, want 400", code, body)
	}
	if code, _ := ts.rawCall(t, admin, "HEAD", "/v1/blobs/"+d, nil); code != http.StatusNotFound {
		t.Errorf("HEAD after a refused PUT = %d, want 404 (nothing stored)", code)
	}
	if code, body := ts.rawCall(t, admin, "PUT", "/v1/blobs/"+d, data); code != http.StatusCreated {
		t.Fatalf("PUT = %d %s, want 201", code, body)
	}
	if code, _ := ts.rawCall(t, admin, "HEAD", "/v1/blobs/"+d, nil); code != http.StatusOK {
		t.Errorf("HEAD after PUT = %d, want 200", code)
	}
	if code, body := ts.rawCall(t, admin, "GET", "/v1/blobs/"+d, nil); code != http.StatusOK || body != string(data) {
		t.Errorf("GET = %d %q, want 200 %q", code, body, data)
	}
	big := bytes.Repeat([]byte("x"), 17)
	if code, body := ts.rawCall(t, admin, "PUT", "/v1/blobs/"+digestOf(big), big); code != http.StatusRequestEntityTooLarge || !strings.Contains(body, "blob-max-size") {
		t.Errorf("PUT over the cap = %d %s, want 413 naming --blob-max-size", code, body)
	}
	if code, body := ts.rawCall(t, admin, "PUT", "/v1/blobs/sha256:XYZ", data); code != http.StatusBadRequest || !strings.Contains(body, "digest") {
		t.Errorf("PUT with a bad digest = %d %s, want 400 naming digest", code, body)
	}
}

// TestSubmitTaskFilesAndDependencies: bad files and dependencies are
// refused with the field named; names resolve in the batch and the suite.
func TestSubmitTaskFilesAndDependencies(t *testing.T) {
	ts := newTestServer(t)
	var su api.Suite
	ts.mustCall(t, http.StatusCreated, ts.admin, "POST", "/v1/suites", api.SuiteSpec{Name: "s"}, &su)
	if su.WorkerSchedule.WorkerCount != 0 {
		t.Errorf("worker_count = %d, want 0 (one per CPU, decided by the node)", su.WorkerSchedule.WorkerCount)
	}
	d := digestOf([]byte("x"))
	cc := api.TaskSpec{Argv: []string{"cc"}, Name: "a", Inputs: []api.TaskFile{{Path: "a.c", Digest: d, Size: 1}}, Outputs: []string{"*.o"}}
	tests := []struct {
		name  string
		tasks []api.TaskSpec
		field string
	}{
		{"escaping input", []api.TaskSpec{{Argv: []string{"x"}, Inputs: []api.TaskFile{{Path: "../etc/passwd", Digest: d}}}}, "tasks[0].inputs[0].path"},
		{"absolute input", []api.TaskSpec{{Argv: []string{"x"}, Inputs: []api.TaskFile{{Path: "/etc/passwd", Digest: d}}}}, "tasks[0].inputs[0].path"},
		{"bad digest", []api.TaskSpec{{Argv: []string{"x"}, Inputs: []api.TaskFile{{Path: "a", Digest: "md5:x"}}}}, "tasks[0].inputs[0].digest"},
		{"bad glob", []api.TaskSpec{{Argv: []string{"x"}, Outputs: []string{"[a"}}}, "tasks[0].outputs[0]"},
		{"absolute workdir with files", []api.TaskSpec{{Argv: []string{"x"}, Outputs: []string{"o"}, Workdir: "/tmp"}}, "tasks[0].workdir"},
		{"unknown dependency", []api.TaskSpec{{Argv: []string{"x"}, After: []string{"nope"}}}, "tasks[0].after[0]"},
		{"input from a task not in after", []api.TaskSpec{cc, {Argv: []string{"ld"}, InputFrom: []api.InputFrom{{Task: "a"}}}}, "tasks[1].input_from[0].task"},
		{"name twice", []api.TaskSpec{cc, cc}, "tasks[1].name"},
		{"cycle", []api.TaskSpec{{Argv: []string{"x"}, Name: "p", After: []string{"q"}}, {Argv: []string{"y"}, Name: "q", After: []string{"p"}}}, "after"},
		{"bad retry", []api.TaskSpec{{Argv: []string{"x"}, Retry: &api.RetryPolicy{FinalExitCodes: []int{0}}}}, "tasks[0].retry.final_exit_codes[0]"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, body := ts.call(t, ts.admin, "POST", "/v1/suites/"+su.ID+"/tasks", api.SubmitTasks{Tasks: tc.tasks}, nil)
			if code != http.StatusBadRequest || !strings.Contains(body, tc.field) {
				t.Errorf("submit = %d %s, want 400 naming %s", code, body, tc.field)
			}
		})
	}
	var ids api.SubmitResult
	ts.mustCall(t, http.StatusCreated, ts.admin, "POST", "/v1/suites/"+su.ID+"/tasks", api.SubmitTasks{Tasks: []api.TaskSpec{cc}}, &ids)
	// A later batch names a stored task by name.
	link := api.TaskSpec{Argv: []string{"ld"}, After: []string{"a"}, InputFrom: []api.InputFrom{{Task: "a", Path: "a.o"}}}
	var more api.SubmitResult
	ts.mustCall(t, http.StatusCreated, ts.admin, "POST", "/v1/suites/"+su.ID+"/tasks", api.SubmitTasks{Tasks: []api.TaskSpec{link}}, &more)
	var got api.Task
	ts.mustCall(t, http.StatusOK, ts.admin, "GET", "/v1/tasks/"+more.IDs[0], nil, &got)
	if got.State != api.TaskPending {
		t.Errorf("link is %s, want Pending until a finished", got.State)
	}
}

// TestCollectBlobsKeepsWhatTasksUse: collection deletes old blobs no task
// names, and keeps the ones tasks name and the recent ones; the groups a
// deleted blob was uploaded into are forgotten.
func TestCollectBlobsKeepsWhatTasksUse(t *testing.T) {
	ts := newTestServerWith(t, Config{BlobRetention: time.Millisecond})
	put := func(b []byte) string {
		info, err := ts.files.Blobs.Put(context.Background(), bytes.NewReader(b), blob.Digest{}, 0)
		if err != nil {
			t.Fatal(err)
		}
		return info.Digest.String()
	}
	used, unused := put([]byte("used")), put([]byte("unused"))
	for _, d := range []string{used, unused} {
		if err := ts.store.AddBlobGroups(context.Background(), d, []string{"a"}); err != nil {
			t.Fatal(err)
		}
	}
	var su api.Suite
	ts.mustCall(t, http.StatusCreated, ts.admin, "POST", "/v1/suites", api.SuiteSpec{Name: "s"}, &su)
	ts.mustCall(t, http.StatusCreated, ts.admin, "POST", "/v1/suites/"+su.ID+"/tasks",
		api.SubmitTasks{Tasks: []api.TaskSpec{{Argv: []string{"cat", "f"}, Inputs: []api.TaskFile{{Path: "f", Digest: used, Size: 4}}}}}, nil)
	time.Sleep(5 * time.Millisecond) // both are older than the retention now
	st, err := ts.files.Collect(context.Background())
	if err != nil || st.Deleted != 1 || st.Kept != 1 {
		t.Fatalf("collect = %+v, %v; want 1 deleted, 1 kept", st, err)
	}
	for d, want := range map[string]int{used: http.StatusOK, unused: http.StatusNotFound} {
		if code, _ := ts.rawCall(t, ts.admin, "HEAD", "/v1/blobs/"+d, nil); code != want {
			t.Errorf("HEAD %s after collect = %d, want %d", d, code, want)
		}
	}
	// The collected blob's groups are forgotten with it; the kept one's stay.
	for d, want := range map[string]bool{used: true, unused: false} {
		if got, err := ts.store.BlobInGroups(context.Background(), d, []string{"a"}); err != nil || got != want {
			t.Errorf("BlobInGroups(%s) after collect = %v, %v, want %v", d, got, err, want)
		}
	}
}

// blobFixture: group a's node n1 holds "use" (input a), which runs after
// "gen" (finished, output out, which n1 uploaded); group b's node n2 holds
// a task with input b; n3 of group a holds nothing. A writer of group a
// uploaded a and early (which no task names yet), a writer of group b
// uploaded b; an admin uploaded unused; absent is not stored.
type blobFixture struct {
	ts                               *testServer
	n1, n2, n3                       string
	reader, writer, outsider         string
	a, b, out, early, unused, absent string
	content                          map[string]string // digest → content
}

func newBlobFixture(t *testing.T) *blobFixture {
	ts := newTestServer(t)
	f := &blobFixture{ts: ts, content: map[string]string{}}
	put := func(token, content string) string {
		d := digestOf([]byte(content))
		ts.mustRaw(t, http.StatusCreated, token, "PUT", "/v1/blobs/"+d, []byte(content))
		f.content[d] = content
		return d
	}
	var n1, n2 string
	n1, f.n1 = ts.nodeNamed(t, "n1", "a")
	n2, f.n2 = ts.nodeNamed(t, "n2", "b")
	_, f.n3 = ts.nodeNamed(t, "n3", "a")
	f.reader = ts.user(t, "reader", false, map[string]string{"a": api.RoleRead})
	f.writer = ts.user(t, "writer", false, map[string]string{"a": api.RoleWrite})
	f.outsider = ts.user(t, "outsider", false, map[string]string{"b": api.RoleWrite})
	f.a, f.early = put(f.writer, "group a's input"), put(f.writer, "uploaded before its tasks")
	f.b = put(f.outsider, "group b's input")
	f.unused = put(ts.admin, "named by nobody")
	f.absent = digestOf([]byte("never uploaded"))

	var sa api.Suite
	ts.mustCall(t, http.StatusCreated, ts.admin, "POST", "/v1/suites", api.SuiteSpec{Name: "sa", Group: "a"}, &sa)
	ts.mustCall(t, http.StatusCreated, ts.admin, "POST", "/v1/suites/"+sa.ID+"/tasks", api.SubmitTasks{Tasks: []api.TaskSpec{
		{Name: "gen", Argv: []string{"gen"}, Outputs: []string{"*.o"}},
		{Name: "use", Argv: []string{"cc"}, After: []string{"gen"}, InputFrom: []api.InputFrom{{Task: "gen"}},
			Inputs: []api.TaskFile{{Path: "a.c", Digest: f.a, Size: 1}}},
	}}, nil)
	ctx := t.Context()
	gen, err := ts.store.ClaimTasks(ctx, sa.ID, n1, 1)
	if err != nil || len(gen) != 1 {
		t.Fatalf("claim gen = %d, %v", len(gen), err)
	}
	f.out = put(f.n1, "gen's output")
	never := func(*api.RetryPolicy, *api.RetryPolicy, []api.TaskFailure) (bool, time.Duration) { return true, 0 }
	if _, err := ts.store.FinishAttempts(ctx, n1, []store.Attempt{{TaskID: gen[0].ID, Attempt: gen[0].Attempt, Outcome: api.OutcomeSucceeded,
		Result: api.TaskResult{Outputs: []api.TaskFile{{Path: "gen.o", Digest: f.out, Size: 1}}}}}, never); err != nil {
		t.Fatal(err)
	}
	if use, err := ts.store.ClaimTasks(ctx, sa.ID, n1, 1); err != nil || len(use) != 1 {
		t.Fatalf("claim use = %d, %v", len(use), err)
	}
	holdTaskWithInput(t, ts, "b", n2, "group b's input")
	return f
}

// blobAnswer is what a blob request answered.
type blobAnswer struct {
	code int
	// head is the headers a caller could tell answers apart by.
	head string
	body string
}

func (f *blobFixture) call(t *testing.T, token, method, digest string) blobAnswer {
	t.Helper()
	var body io.Reader
	if method == "PUT" {
		body = strings.NewReader(f.content[digest])
	}
	req, err := http.NewRequestWithContext(t.Context(), method, f.ts.http.URL+"/v1/blobs/"+digest, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := f.ts.http.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return blobAnswer{code: resp.StatusCode, body: string(raw),
		head: resp.Header.Get("Content-Type") + " " + resp.Header.Get("Content-Length")}
}

// TestBlobAccess: who may read, check for and store a blob by digest
// (issue 26, item 2). A node reads only files of the tasks it holds; a
// Read-only user neither checks nor uploads; HEAD and GET answer a file
// the caller may not know of exactly as an absent one.
func TestBlobAccess(t *testing.T) {
	f := newBlobFixture(t)
	tests := []struct {
		name, caller, method, blob string
		want                       int
	}{
		{"node reads its task's input", "n1", "GET", "a", http.StatusOK},
		{"node reads the output of the task its task runs after", "n1", "GET", "out", http.StatusOK},
		{"node reads another group's input", "n1", "GET", "b", http.StatusNotFound},
		{"node reads a file no task names", "n1", "GET", "unused", http.StatusNotFound},
		{"node reads an absent file", "n1", "GET", "absent", http.StatusNotFound},
		{"foreign node reads group a's input", "n2", "GET", "a", http.StatusNotFound},
		{"foreign node reads group a's output", "n2", "GET", "out", http.StatusNotFound},
		{"foreign node reads its own task's input", "n2", "GET", "b", http.StatusOK},
		{"idle node of the group reads its input", "n3", "GET", "a", http.StatusNotFound},
		{"writer reads by digest", "writer", "GET", "a", http.StatusForbidden},
		{"admin reads by digest", "admin", "GET", "unused", http.StatusOK},

		{"node checks its input", "n1", "HEAD", "a", http.StatusOK},
		{"node checks another group's input", "n1", "HEAD", "b", http.StatusNotFound},
		{"node checks a file an admin uploaded", "n1", "HEAD", "unused", http.StatusNotFound},
		{"node checks a file of its group no task names yet", "n1", "HEAD", "early", http.StatusOK},
		{"foreign node checks group a's output", "n2", "HEAD", "out", http.StatusNotFound},
		{"idle node checks", "n3", "HEAD", "a", http.StatusForbidden},
		{"reader checks", "reader", "HEAD", "a", http.StatusForbidden},
		{"writer checks an input of the group", "writer", "HEAD", "a", http.StatusOK},
		{"writer checks an output a node of the group uploaded", "writer", "HEAD", "out", http.StatusOK},
		{"writer checks another group's input", "writer", "HEAD", "b", http.StatusNotFound},
		{"writer checks a file it uploaded that no task names yet", "writer", "HEAD", "early", http.StatusOK},
		{"writer checks a file an admin uploaded", "writer", "HEAD", "unused", http.StatusNotFound},
		{"writer checks an absent file", "writer", "HEAD", "absent", http.StatusNotFound},
		{"writer of another group checks group a's input", "outsider", "HEAD", "a", http.StatusNotFound},
		{"writer of another group checks its own", "outsider", "HEAD", "b", http.StatusOK},
		{"writer of another group checks one group a uploaded early", "outsider", "HEAD", "early", http.StatusNotFound},
		{"admin checks a file no task names", "admin", "HEAD", "unused", http.StatusOK},

		{"node uploads", "n1", "PUT", "unused", http.StatusCreated},
		{"idle node uploads", "n3", "PUT", "unused", http.StatusForbidden},
		{"reader uploads", "reader", "PUT", "unused", http.StatusForbidden},
		{"writer uploads", "writer", "PUT", "unused", http.StatusCreated},
		{"writer of another group uploads group a's file", "outsider", "PUT", "a", http.StatusCreated},
	}
	tokens := map[string]string{"n1": f.n1, "n2": f.n2, "n3": f.n3, "reader": f.reader, "writer": f.writer,
		"outsider": f.outsider, "admin": f.ts.admin}
	digests := map[string]string{"a": f.a, "b": f.b, "out": f.out, "early": f.early, "unused": f.unused, "absent": f.absent}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := digests[tc.blob]
			got := f.call(t, tokens[tc.caller], tc.method, d)
			if got.code != tc.want {
				t.Fatalf("%s %s %s = %d %s, want %d", tc.caller, tc.method, tc.blob, got.code, firstLine(got.body), tc.want)
			}
			if tc.method == "GET" && got.code == http.StatusOK && got.body != f.content[d] {
				t.Errorf("%s GET %s = %q, want %q", tc.caller, tc.blob, got.body, f.content[d])
			}
		})
	}
}

// TestBlobNotYoursLooksAbsent: a blob the caller may not know of is
// answered exactly as an absent one (status, headers, and body but for the
// digest it names), so neither HEAD nor GET tells whether another group
// holds a file.
func TestBlobNotYoursLooksAbsent(t *testing.T) {
	f := newBlobFixture(t)
	tests := []struct {
		name, token, method string
	}{
		{"writer of another group, HEAD", f.outsider, "HEAD"},
		{"node of another group, HEAD", f.n2, "HEAD"},
		{"node of another group, GET", f.n2, "GET"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// The absent digest stands in the answer where a's would be.
			notYours := f.call(t, tc.token, tc.method, f.a)
			absent := f.call(t, tc.token, tc.method, f.absent)
			notYours.body = strings.ReplaceAll(notYours.body, f.a, f.absent)
			if notYours != absent {
				t.Errorf("%s of group a's file = %+v, of an absent file = %+v; want the same", tc.method, notYours, absent)
			}
			if absent.code != http.StatusNotFound {
				t.Errorf("%s of an absent file = %d, want 404", tc.method, absent.code)
			}
		})
	}
}
