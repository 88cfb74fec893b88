package server

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/archive"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
	"github.com/nodemgr/nodemgr/internal/drivers/execute/executetest"
	"github.com/nodemgr/nodemgr/internal/drivers/execute/ssh/sshtest"
	"github.com/nodemgr/nodemgr/internal/drivers/provision"
)

func TestMain(m *testing.M) { os.Exit(sshtest.Main(m)) }

func TestExecCopyVia(t *testing.T) {
	srv := sshtest.Shared(t)
	sshtest.Need(t, "rsync")
	s, st, admin := newServer(t, "", Config{ExecutorSettings: map[string]map[string]string{"ssh": srv.Settings()}})
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	ts := &testServer{Server: s, http: hs, admin: admin}
	now := time.Now()
	d := store.Deployment{ID: "dep-ssh", Provider: "local", ResourceID: "r", Name: "vm-1", State: provision.StateRunning,
		Address: srv.Addr, Executors: []string{"exec:ssh", "copy:sftp", "copy:rsync"}, CreatedAt: now, UpdatedAt: now}
	if err := st.CreateDeployment(t.Context(), d); err != nil {
		t.Fatal(err)
	}

	for _, via := range []string{"", "ssh", "sftp", "rsync"} {
		t.Run("exec via "+via, func(t *testing.T) {
			code, stdout, errMsg := execCall(t, ts, api.ExecRequest{Argv: []string{"sh", "-c", "id -un; exit 3"}, Via: via})
			if errMsg != "" || code != 3 || stdout != srv.User+"\n" {
				t.Errorf("exec via %q = %d, %q, error %q; want 3, %s", via, code, stdout, errMsg, srv.User)
			}
		})
	}
	src := executetest.Tree(t, t.TempDir(), "tree")
	want := executetest.Listing(t, src)
	for _, via := range []string{"", "ssh", "sftp", "rsync"} {
		t.Run("copy via "+via, func(t *testing.T) {
			// The machine is this host: its paths are local ones.
			remote := filepath.Join(t.TempDir(), "copy")
			var body bytes.Buffer
			if err := archive.Write(t.Context(), &body, src, "tree"); err != nil {
				t.Fatal(err)
			}
			if code, msg := raw(t, ts, "PUT", "/v1/deployments/vm-1/files?"+query(remote, via), &body); code != http.StatusNoContent {
				t.Fatalf("PUT files via %q = %d %s", via, code, msg)
			}
			if diff := cmp.Diff(want, executetest.Listing(t, remote)); diff != "" {
				t.Errorf("copied via %q (-want +got):\n%s", via, diff)
			}
			code, tarball := raw(t, ts, "GET", "/v1/deployments/vm-1/files?"+query(remote, via), nil)
			if code != http.StatusOK {
				t.Fatalf("GET files via %q = %d %s", via, code, tarball)
			}
			back := filepath.Join(t.TempDir(), "back")
			if err := archive.ExtractAt(t.Context(), strings.NewReader(tarball), back); err != nil {
				t.Fatalf("the copy back via %q: %v", via, err)
			}
			if diff := cmp.Diff(want, executetest.Listing(t, back)); diff != "" {
				t.Errorf("copied back via %q (-want +got):\n%s", via, diff)
			}
		})
	}

	refused := []struct {
		via, says string
	}{
		{"docker", "does not offer the docker executor (exec:docker); it offers ssh (exec:ssh), sftp (copy:sftp), rsync (copy:rsync)"},
		{"scp", `no executor \"scp\"`},
	}
	for _, tc := range refused {
		t.Run("refused via "+tc.via, func(t *testing.T) {
			code, body := ts.call(t, admin, "POST", "/v1/deployments/vm-1/exec", api.ExecRequest{Argv: []string{"true"}, Via: tc.via}, nil)
			if code != http.StatusBadRequest || !strings.Contains(body, tc.says) || !strings.Contains(body, `"field": "via"`) {
				t.Errorf("exec via %s = %d %s; want 400 naming via and saying %q", tc.via, code, body, tc.says)
			}
			code, body = raw(t, ts, "GET", "/v1/deployments/vm-1/files?"+query("/etc/hostname", tc.via), nil)
			if code != http.StatusBadRequest || !strings.Contains(body, tc.says) {
				t.Errorf("GET files via %s = %d %s; want 400 saying %q", tc.via, code, body, tc.says)
			}
		})
	}
}

// TestExecKeepsConnection checks that the server keeps one SSH
// connection per machine across requests: commands, and copies with sftp
// and rsync, all go over one, and one that broke is dialed again.
func TestExecKeepsConnection(t *testing.T) {
	srv := sshtest.Shared(t)
	sshtest.Need(t, "rsync")
	p := sshtest.NewProxy(t, srv.Addr)
	settings := srv.Settings()
	settings["known_hosts"] = srv.KnownHostsFile(t, p.Addr)
	s, st, admin := newServer(t, "", Config{ExecutorSettings: map[string]map[string]string{"ssh": settings}})
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	ts := &testServer{Server: s, http: hs, admin: admin}
	now := time.Now()
	if err := st.CreateDeployment(t.Context(), store.Deployment{ID: "dep-ssh", Provider: "local", ResourceID: "r", Name: "vm-1",
		State: provision.StateRunning, Address: p.Addr, Executors: []string{"exec:ssh", "copy:sftp", "copy:rsync"},
		CreatedAt: now, UpdatedAt: now}); err != nil {
		t.Fatal(err)
	}
	exec := func(what string) {
		t.Helper()
		if code, out, errMsg := execCall(t, ts, api.ExecRequest{Argv: []string{"echo", what}}); code != 0 || out != what+"\n" {
			t.Fatalf("exec %s = %d, %q, error %q", what, code, out, errMsg)
		}
	}
	exec("one")
	exec("two")
	src := executetest.Tree(t, t.TempDir(), "tree")
	for _, via := range []string{"sftp", "rsync"} {
		var body bytes.Buffer
		if err := archive.Write(t.Context(), &body, src, "tree"); err != nil {
			t.Fatal(err)
		}
		remote := filepath.Join(t.TempDir(), "copy")
		if code, msg := raw(t, ts, "PUT", "/v1/deployments/vm-1/files?"+query(remote, via), &body); code != http.StatusNoContent {
			t.Fatalf("PUT files via %s = %d %s", via, code, msg)
		}
		if diff := cmp.Diff(executetest.Listing(t, src), executetest.Listing(t, remote)); diff != "" {
			t.Errorf("copied via %s (-want +got):\n%s", via, diff)
		}
	}
	if n := p.Accepted(); n != 1 {
		t.Errorf("two execs and two copies made %d connections to the machine, want 1", n)
	}
	p.Break() // as sshd's restart or a machine's reboot would
	exec("three")
	if n := p.Accepted(); n != 2 {
		t.Errorf("after the connection broke: %d connections in all, want 2", n)
	}
}

func query(path, via string) string {
	q := url.Values{"path": {path}}
	if via != "" {
		q.Set("via", via)
	}
	return q.Encode()
}

// execCall runs a command through the API and returns its exit code,
// stdout and the error event's message.
func execCall(t *testing.T, ts *testServer, req api.ExecRequest) (int, string, string) {
	t.Helper()
	b, _ := json.Marshal(req)
	code, body := raw(t, ts, "POST", "/v1/deployments/vm-1/exec", bytes.NewReader(b))
	if code != http.StatusOK {
		t.Fatalf("exec = %d %s", code, body)
	}
	var stdout strings.Builder
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		var ev api.ExecEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("exec event %q: %v", sc.Text(), err)
		}
		switch {
		case ev.Exit != nil:
			return *ev.Exit, stdout.String(), ""
		case ev.Error != "":
			return -1, stdout.String(), ev.Error
		case ev.Stream == "stdout":
			stdout.Write(ev.Data)
		}
	}
	t.Fatalf("exec: no exit event in %q", body)
	return 0, "", ""
}

// raw sends a request with the admin token and returns the status and
// body.
func raw(t *testing.T, ts *testServer, method, path string, body io.Reader) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, ts.http.URL+path, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+ts.admin)
	if method == "POST" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := ts.http.Client().Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
