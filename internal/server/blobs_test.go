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
	"github.com/nodemgr/nodemgr/internal/blob"
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
// names, and keeps the ones tasks name and the recent ones.
func TestCollectBlobsKeepsWhatTasksUse(t *testing.T) {
	ts := newTestServer(t)
	ts.cfg.BlobRetention = time.Millisecond
	put := func(b []byte) string {
		info, err := ts.blobs.Put(context.Background(), bytes.NewReader(b), blob.Digest{}, 0)
		if err != nil {
			t.Fatal(err)
		}
		return info.Digest.String()
	}
	used, unused := put([]byte("used")), put([]byte("unused"))
	var su api.Suite
	ts.mustCall(t, http.StatusCreated, ts.admin, "POST", "/v1/suites", api.SuiteSpec{Name: "s"}, &su)
	ts.mustCall(t, http.StatusCreated, ts.admin, "POST", "/v1/suites/"+su.ID+"/tasks",
		api.SubmitTasks{Tasks: []api.TaskSpec{{Argv: []string{"cat", "f"}, Inputs: []api.TaskFile{{Path: "f", Digest: used, Size: 4}}}}}, nil)
	time.Sleep(5 * time.Millisecond) // both are older than the retention now
	st, err := ts.collectBlobs(context.Background())
	if err != nil || st.Deleted != 1 || st.Kept != 1 {
		t.Fatalf("collect = %+v, %v; want 1 deleted, 1 kept", st, err)
	}
	for d, want := range map[string]int{used: http.StatusOK, unused: http.StatusNotFound} {
		if code, _ := ts.rawCall(t, ts.admin, "HEAD", "/v1/blobs/"+d, nil); code != want {
			t.Errorf("HEAD %s after collect = %d, want %d", d, code, want)
		}
	}
}
