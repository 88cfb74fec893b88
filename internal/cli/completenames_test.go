package cli

import (
	"strings"
	"testing"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/client"
)

// TestCompletion: the shell completes the names the server knows where a
// command takes one (SUITE, a --suite flag) and the values of enum flags
// (issue 31 item 13).
func TestCompletion(t *testing.T) {
	url, admin := realServer(t)
	c := client.New(url, admin)
	for _, name := range []string{"render", "build"} {
		if _, err := c.CreateSuite(t.Context(), api.SuiteSpec{Name: name, WorkerSchedule: api.WorkerSchedule{WorkerCount: 1}}); err != nil {
			t.Fatal(err)
		}
	}
	vars := map[string]string{"NODEMGR_ADDR": url, "NODEMGR_TOKEN": admin}
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"suite", "show", ""}, []string{"render", "build"}},
		{[]string{"suite", "watch", ""}, []string{"render", "build"}},
		{[]string{"task", "ls", "--suite", ""}, []string{"render", "build"}},
		{[]string{"suite", "ls", "--state", ""}, []string{api.SuiteOpen, api.SuiteComplete}},
		{[]string{"node", "ls", "--status", ""}, []string{api.StatusOnline, api.StatusOffline}},
		{[]string{"provision", "--provider", ""}, []string{"docker", "libvirt", "aws"}},
	} {
		code, out, stderr := runEnv(t, vars, append([]string{"__complete"}, tc.args...)...)
		if code != 0 {
			t.Fatalf("__complete %v = exit %d: %s", tc.args, code, stderr)
		}
		got := strings.Split(strings.TrimSpace(out), "\n")
		for _, w := range tc.want {
			found := false
			for _, g := range got {
				found = found || strings.SplitN(g, "\t", 2)[0] == w
			}
			if !found {
				t.Errorf("completing %v gave %q, want %s among them", tc.args, got, w)
			}
		}
	}
}
