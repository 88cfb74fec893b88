package storetest

import (
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/base/sha256sum"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
)

// digestOf is a blob digest named after s.
func digestOf(s string) string {
	d, _, _ := sha256sum.Reader(strings.NewReader(s))
	return d
}

func inputs(digests ...string) []api.TaskFile {
	files := make([]api.TaskFile, len(digests))
	for i, d := range digests {
		files[i] = api.TaskFile{Path: "in/" + d[len(d)-8:], Digest: d, Size: 1}
	}
	return files
}

// taskFilesFixture: in group a, n1 holds "use", which has input in and
// shared and runs after "dep" (finished, with input depIn and output out,
// which n1 uploaded while it ran dep); "idle" (input idle) waits in another
// suite of group a. In group b, n2 holds "b1" (inputs b and shared). n3
// holds nothing. Group a's writers uploaded in, shared, depIn and idle;
// group b's, b and shared.
func taskFilesFixture(t *testing.T, s store.Store) {
	t.Helper()
	upload := func(group string, blobs ...string) {
		t.Helper()
		for _, b := range blobs {
			if err := s.AddBlobGroups(t.Context(), digestOf(b), []string{group}); err != nil {
				t.Fatalf("AddBlobGroups(%s, %s) = %v", b, group, err)
			}
		}
	}
	upload("a", "in", "shared", "depIn", "idle")
	upload("b", "b", "shared")
	for id, group := range map[string]string{"sa": "a", "sa2": "a", "sb": "b"} {
		su := newSuite(id)
		su.Spec.Group = group
		mustCreateSuite(t, s, su)
	}
	for n, group := range map[string]string{"n1": "a", "n2": "b", "n3": "a"} {
		node := newNode(n)
		node.Groups = []string{group} // claims admit only nodes of the suite's group
		mustCreateNode(t, s, node)
	}
	dep := after("dep", "dep")
	dep.Spec.Inputs = inputs(digestOf("depIn"))
	use := after("use", "use", "dep")
	use.Spec.Inputs = inputs(digestOf("in"), digestOf("shared"), digestOf("in")) // a digest twice: two paths, one row
	use.Spec.InputFrom = []api.InputFrom{{Task: "dep"}}
	mustAddTasks(t, s, "sa", dep, use)
	idle := after("idle", "idle")
	idle.Spec.Inputs = inputs(digestOf("idle"))
	mustAddTasks(t, s, "sa2", idle)
	b1 := after("b1", "b1")
	b1.Spec.Inputs = inputs(digestOf("b"), digestOf("shared"))
	mustAddTasks(t, s, "sb", b1)

	claimed := mustClaim(t, s, "sa", "n1", 10)
	if err := s.AddNodeBlob(t.Context(), "n1", digestOf("out")); err != nil {
		t.Fatalf("AddNodeBlob(n1, out) = %v", err)
	}
	done := succeeded(task(claimed, "dep"))
	done.Result.Outputs = []api.TaskFile{{Path: "dep.o", Digest: digestOf("out"), Size: 3}}
	mustFinish(t, s, "n1", 1, abortAfter(1), done)
	if got := mustClaim(t, s, "sa", "n1", 10); len(got) != 1 || got[0].ID != "use" {
		t.Fatalf("claim in sa after dep = %v, want [use]", taskIDs(got))
	}
	if got := mustClaim(t, s, "sb", "n2", 10); len(got) != 1 {
		t.Fatalf("claim in sb = %v, want [b1]", taskIDs(got))
	}
}

// testNodeReadsBlob: a node reads a blob only while it holds a task that
// names it as an input, or that runs after a task that output it.
func testNodeReadsBlob(t *testing.T, s store.Store) {
	taskFilesFixture(t, s)
	tests := []struct {
		name, node, blob string
		want             bool
	}{
		{"input of a held task", "n1", "in", true},
		{"input shared with another group", "n1", "shared", true},
		{"output of a task it runs after", "n1", "out", true},
		{"input of the task it runs after", "n1", "depIn", false},
		{"input of a task nobody holds", "n1", "idle", false},
		{"input of another group's task", "n1", "b", false},
		{"never named", "n1", "nothing", false},
		{"foreign node, group a's input", "n2", "in", false},
		{"foreign node, group a's output", "n2", "out", false},
		{"foreign node, its own input", "n2", "b", true},
		{"foreign node, a shared input", "n2", "shared", true},
		{"node holding nothing", "n3", "in", false},
		{"unknown node", "n9", "in", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := s.NodeReadsBlob(t.Context(), tc.node, digestOf(tc.blob))
			if err != nil || got != tc.want {
				t.Errorf("NodeReadsBlob(%s, %s) = %v, %v, want %v, nil", tc.node, tc.blob, got, err, tc.want)
			}
		})
	}

	// Once the task is no longer Running on the node, its files are not
	// the node's: a report, or a reclaim.
	claimed := []store.Task{mustGetTask(t, s, "use")}
	mustFinish(t, s, "n1", 1, abortAfter(1), succeeded(task(claimed, "use")))
	mustReclaim(t, s, "n2", 1)
	for _, c := range []struct{ node, blob string }{{"n1", "in"}, {"n1", "out"}, {"n2", "b"}} {
		if got, err := s.NodeReadsBlob(t.Context(), c.node, digestOf(c.blob)); err != nil || got {
			t.Errorf("NodeReadsBlob(%s, %s) after its task left it = %v, %v, want false, nil", c.node, c.blob, got, err)
		}
	}
}

// testNodeBlobScope: a node holds a task or not, and learns of the blobs
// uploaded into the groups of the suites it holds tasks of, not of others.
func testNodeBlobScope(t *testing.T, s store.Store) {
	taskFilesFixture(t, s)
	tests := []struct {
		name, node, blob  string
		holding, uploaded bool
	}{
		{"own input", "n1", "in", true, true},
		{"output it uploaded", "n1", "out", true, true},
		{"input of an idle task in its group", "n1", "idle", true, true},
		{"another group's upload", "n1", "b", true, false},
		{"never uploaded", "n1", "nothing", true, false},
		{"foreign node, group a's input", "n2", "in", true, false},
		{"foreign node, group a's output", "n2", "out", true, false},
		{"foreign node, uploaded into both", "n2", "shared", true, true},
		{"node holding nothing", "n3", "in", false, false},
		{"unknown node", "n9", "in", false, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			holding, uploaded, err := s.NodeBlobScope(t.Context(), tc.node, digestOf(tc.blob))
			if err != nil || holding != tc.holding || uploaded != tc.uploaded {
				t.Errorf("NodeBlobScope(%s, %s) = %v, %v, %v, want %v, %v, nil", tc.node, tc.blob, holding, uploaded, err, tc.holding, tc.uploaded)
			}
		})
	}
}

// testBlobInGroups: a blob is in the groups it was uploaded into, by a
// user or by a node for its tasks' groups, until its groups are forgotten;
// recording it twice, or for no group, is no error, and a node that holds
// no task records nothing.
func testBlobInGroups(t *testing.T, s store.Store) {
	taskFilesFixture(t, s)
	ctx := t.Context()
	if err := s.AddBlobGroups(ctx, digestOf("in"), []string{"a"}); err != nil {
		t.Errorf("AddBlobGroups again = %v, want nil", err)
	}
	if err := s.AddBlobGroups(ctx, digestOf("none"), nil); err != nil {
		t.Errorf("AddBlobGroups(no groups) = %v, want nil", err)
	}
	if err := s.AddNodeBlob(ctx, "n3", digestOf("idle node's")); err != nil {
		t.Errorf("AddNodeBlob(n3) = %v, want nil", err)
	}
	tests := []struct {
		name, blob string
		groups     []string
		want       bool
	}{
		{"uploaded", "in", []string{"a"}, true},
		{"uploaded by a node", "out", []string{"a"}, true},
		{"another group's", "in", []string{"b"}, false},
		{"another group's output", "out", []string{"b", "c"}, false},
		{"one of several groups", "b", []string{"c", "b"}, true},
		{"uploaded into both", "shared", []string{"b"}, true},
		{"no groups", "in", nil, false},
		{"never uploaded", "nothing", []string{"a", "b"}, false},
		{"for no group", "none", []string{""}, false},
		{"by a node holding nothing", "idle node's", []string{"a", "b", ""}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := s.BlobInGroups(ctx, digestOf(tc.blob), tc.groups)
			if err != nil || got != tc.want {
				t.Errorf("BlobInGroups(%s, %q) = %v, %v, want %v, nil", tc.blob, tc.groups, got, err, tc.want)
			}
		})
	}

	if err := s.ForgetBlobGroups(ctx, []string{digestOf("shared"), digestOf("never")}); err != nil {
		t.Fatalf("ForgetBlobGroups() = %v", err)
	}
	if err := s.ForgetBlobGroups(ctx, nil); err != nil {
		t.Errorf("ForgetBlobGroups(none) = %v, want nil", err)
	}
	for blob, want := range map[string]bool{"shared": false, "in": true} {
		if got, err := s.BlobInGroups(ctx, digestOf(blob), []string{"a", "b"}); err != nil || got != want {
			t.Errorf("BlobInGroups(%s) after forgetting shared = %v, %v, want %v", blob, got, err, want)
		}
	}
}

// testBlobsInUse: the digests named by every task's inputs and results,
// whatever its state, and no others.
func testBlobsInUse(t *testing.T, s store.Store) {
	taskFilesFixture(t, s)
	got, err := s.BlobsInUse(t.Context())
	if err != nil {
		t.Fatalf("BlobsInUse() = %v", err)
	}
	var want []string
	for _, b := range []string{"in", "shared", "depIn", "out", "idle", "b"} {
		want = append(want, digestOf(b))
	}
	slices.Sort(want)
	if keys := slices.Sorted(maps.Keys(got)); !slices.Equal(keys, want) {
		t.Errorf("BlobsInUse() = %v, want %v", keys, want)
	}
}

// testTaskLogs: the full logs reports name are kept per attempt, shown
// with the failures they belong to, and kept from the blob collection.
func testTaskLogs(t *testing.T, s store.Store) {
	mustCreateSuite(t, s, newSuite("s1"))
	mustAddTasks(t, s, "s1", newTasks("s1", 1)...)
	retryOnce := func(_, _ *api.RetryPolicy, failures []api.TaskFailure) (bool, time.Duration) { return false, 0 }

	first := mustClaim(t, s, "s1", "n1", 1)[0]
	log1 := &api.TaskLog{Digest: digestOf("log1"), Bytes: 300_000}
	report := failed(first, "exit status 1")
	report.Result.Log, report.Failure.Log = log1, log1
	mustFinish(t, s, "n1", 1, retryOnce, report)

	second := mustClaim(t, s, "s1", "n1", 1)[0]
	log2 := &api.TaskLog{Digest: digestOf("log2"), Bytes: 70 << 20, Truncated: true}
	ok := succeeded(second)
	ok.Result.Log = log2
	mustFinish(t, s, "n1", 1, nil, ok)

	for attempt, want := range map[int]*api.TaskLog{1: log1, 2: log2} {
		got, err := s.TaskLog(t.Context(), first.ID, attempt)
		if err != nil || got != *want {
			t.Errorf("TaskLog(%s, %d) = %+v, %v; want %+v", first.ID, attempt, got, err, *want)
		}
	}
	if _, err := s.TaskLog(t.Context(), first.ID, 3); !errdefs.IsNotFound(err) {
		t.Errorf("TaskLog of an attempt that kept none = %v, want NotFound", err)
	}
	tk := mustGetTask(t, s, first.ID)
	if len(tk.Failures) != 1 || tk.Failures[0].Log == nil || *tk.Failures[0].Log != *log1 {
		t.Errorf("the failure does not name its log: %+v", tk.Failures)
	}
	if tk.Result == nil || tk.Result.Log == nil || *tk.Result.Log != *log2 {
		t.Errorf("the result does not name its log: %+v", tk.Result)
	}
	used, err := s.BlobsInUse(t.Context())
	if err != nil || !used[log1.Digest] || !used[log2.Digest] {
		t.Errorf("BlobsInUse() = %v, %v; want both logs kept", used, err)
	}
}
