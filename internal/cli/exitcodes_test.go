package cli

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/nodemgr/nodemgr/api"
)

// TestExitCodes: 0 done, 1 the operation failed, 2 the command line is
// wrong, as nodemgr --help says (issue 31 item 11: task submit without a
// command exited 1, container deploy of a job that failed at once 0).
func TestExitCodes(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode([]api.Container{{Job: api.ContainerJob{ID: "c-1", Name: "fails"}, Status: api.ContainerFailed}})
	}))
	defer srv.Close()
	vars := map[string]string{"NODEMGR_ADDR": srv.URL, "NODEMGR_TOKEN": "nmu_test"}
	job := writeFile(t, "job.yaml", "name: fails\nimage: busybox\ncommand: [\"false\"]\n")
	for _, tc := range []struct {
		args []string
		want int
	}{
		{[]string{"task", "submit", "--suite", "s"}, exitUsage},
		{[]string{"task", "submit", "--", "true"}, exitUsage},
		{[]string{"task", "submit", "--suite", "s", "-f", job, "--", "true"}, exitUsage},
		{[]string{"container", "deploy", "n-1", "-f", job}, 1},
		{[]string{"container", "deploy", "n-1", "-f", job, "--json"}, 1},
	} {
		if code, _, stderr := runEnv(t, vars, tc.args...); code != tc.want {
			t.Errorf("nodemgr %v = exit %d (%s), want %d", tc.args, code, stderr, tc.want)
		}
	}
}
