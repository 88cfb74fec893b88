package rsync_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/drivers/execute"
	"github.com/nodemgr/nodemgr/internal/drivers/execute/executetest"
	"github.com/nodemgr/nodemgr/internal/drivers/execute/rsync"
	"github.com/nodemgr/nodemgr/internal/drivers/execute/ssh"
	"github.com/nodemgr/nodemgr/internal/drivers/execute/ssh/sshtest"
	"github.com/nodemgr/nodemgr/internal/drivers/provision"
)

func TestMain(m *testing.M) { os.Exit(sshtest.Main(m)) }

// node returns an executor with settings (over the server's own) and a
// deployment of the test server.
func node(t testing.TB, settings map[string]string) (*rsync.Rsync, provision.Deployment, *sshtest.Server) {
	t.Helper()
	sshtest.Need(t, "rsync")
	return sshtest.Executor(t, rsync.New, settings, ssh.Capability, rsync.Capability)
}

func TestConformance(t *testing.T) {
	executetest.Run(t, func(t *testing.T) executetest.Target {
		r, d, srv := node(t, nil)
		return srv.Target(r, d)
	})
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// TestOnlyChangesSent checks that copying a tree again sends nothing
// when nothing changed, and only the file that changed otherwise, both
// ways.
func TestOnlyChangesSent(t *testing.T) {
	r, d, _ := node(t, nil)
	ctx := ctxFor(t)
	src := executetest.Tree(t, t.TempDir(), "tree")
	// The machine is this host: its paths are local ones.
	remote := filepath.Join(t.TempDir(), "copy")

	st, err := r.CopyToStats(ctx, d, src, remote)
	if err != nil {
		t.Fatalf("CopyToStats = %v", err)
	}
	if st.Files != 4 {
		t.Errorf("first copy sent %d files, want 4", st.Files)
	}
	if st, err = r.CopyToStats(ctx, d, src, remote); err != nil || st.Files != 0 || st.Bytes != 0 {
		t.Errorf("second copy of an unchanged tree = %+v, %v; want 0 files sent", st, err)
	}
	if err := os.WriteFile(filepath.Join(src, "sub", "data.txt"), []byte("changed\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	if st, err = r.CopyToStats(ctx, d, src, remote); err != nil || st.Files != 1 || st.Bytes != int64(len("changed\n")) {
		t.Errorf("copy after one change = %+v, %v; want 1 file, 8 bytes sent", st, err)
	}
	if diff := cmp.Diff(executetest.Listing(t, src), executetest.Listing(t, remote)); diff != "" {
		t.Errorf("copy on the machine (-want +got):\n%s", diff)
	}

	back := filepath.Join(t.TempDir(), "back")
	if st, err = r.CopyFromStats(ctx, d, remote, back); err != nil || st.Files != 4 {
		t.Errorf("CopyFromStats = %+v, %v; want 4 files sent", st, err)
	}
	if st, err = r.CopyFromStats(ctx, d, remote, back); err != nil || st.Files != 0 {
		t.Errorf("second CopyFromStats = %+v, %v; want 0 files sent", st, err)
	}
}

// TestJumpHost copies through the server as a jump host at another
// address: the copy goes over the ssh executor's one connection, which
// the jump carries.
func TestJumpHost(t *testing.T) {
	srv := sshtest.Shared(t)
	p := sshtest.NewProxy(t, srv.Addr)
	kh := srv.KnownHostsFile(t, srv.Addr, p.Addr)
	r, d, _ := node(t, map[string]string{"known_hosts": kh, "jump_host": p.Addr})
	src := executetest.Tree(t, t.TempDir(), "tree")
	remote := filepath.Join(t.TempDir(), "copy")
	if err := r.CopyTo(ctxFor(t), d, src, remote); err != nil {
		t.Fatalf("CopyTo through %s = %v", p.Addr, err)
	}
	if diff := cmp.Diff(executetest.Listing(t, src), executetest.Listing(t, remote)); diff != "" {
		t.Errorf("copy through the jump host (-want +got):\n%s", diff)
	}
	if n := p.Accepted(); n != 1 {
		t.Errorf("the jump host took %d connections, want 1", n)
	}
}

// TestCopiesRideTheConnection checks that rsync goes over the ssh
// executor's kept connection: copies both ways, first and unchanged, and
// commands, all on one connection; one that broke is dialed again.
func TestCopiesRideTheConnection(t *testing.T) {
	srv := sshtest.Shared(t)
	p := sshtest.NewProxy(t, srv.Addr)
	r, d, _ := node(t, map[string]string{"known_hosts": srv.KnownHostsFile(t, p.Addr)})
	d.Address = p.Addr
	ctx := ctxFor(t)
	src := executetest.Tree(t, t.TempDir(), "tree")
	want := executetest.Listing(t, src)
	remote, back := filepath.Join(t.TempDir(), "copy"), filepath.Join(t.TempDir(), "back")
	for i, files := range []int{4, 0} {
		if st, err := r.CopyToStats(ctx, d, src, remote); err != nil || st.Files != files {
			t.Fatalf("CopyToStats %d = %+v, %v; want %d files sent", i+1, st, err, files)
		}
		if st, err := r.CopyFromStats(ctx, d, remote, back); err != nil || st.Files != files {
			t.Fatalf("CopyFromStats %d = %+v, %v; want %d files sent", i+1, st, err, files)
		}
	}
	if code, err := r.Exec(ctx, d, execute.Command{Argv: []string{"true"}}); code != 0 || err != nil {
		t.Fatalf("Exec(true) = %d, %v", code, err)
	}
	if n := p.Accepted(); n != 1 {
		t.Errorf("four copies and a command made %d connections, want 1", n)
	}
	for _, dir := range []string{remote, back} {
		if diff := cmp.Diff(want, executetest.Listing(t, dir)); diff != "" {
			t.Errorf("%s (-want +got):\n%s", dir, diff)
		}
	}

	p.Break()
	again := filepath.Join(t.TempDir(), "again")
	if err := r.CopyTo(ctx, d, src, again); err != nil {
		t.Fatalf("CopyTo after the connection broke = %v", err)
	}
	if diff := cmp.Diff(want, executetest.Listing(t, again)); diff != "" {
		t.Errorf("copy after the connection broke (-want +got):\n%s", diff)
	}
	if n := p.Accepted(); n != 2 {
		t.Errorf("after the connection broke: %d connections in all, want 2", n)
	}
}

// TestHostKeyChecked checks that the host key is checked where the ssh
// executor connects, against its known_hosts, and that the refusal names
// the file.
func TestHostKeyChecked(t *testing.T) {
	kh := filepath.Join(t.TempDir(), "known_hosts")
	if err := os.WriteFile(kh, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	r, d, _ := node(t, map[string]string{"known_hosts": kh})
	src := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(src, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "f")
	err := r.CopyTo(ctxFor(t), d, src, dst)
	if !errors.Is(err, errdefs.ErrPermission) || !strings.Contains(err.Error(), "is not in known_hosts "+kh) {
		t.Errorf("CopyTo with the key not in known_hosts = %v, want permission denied naming %s", err, kh)
	}
	if _, err := os.Lstat(dst); err == nil {
		t.Errorf("%s was written", dst)
	}
}

// TestExecNeedsSSH checks that commands go through the ssh executor,
// which a deployment with copy:rsync alone does not carry, while copies
// need only copy:rsync.
func TestExecNeedsSSH(t *testing.T) {
	r, d, _ := node(t, nil)
	sshtest.CopyOnly(t, r, d)
}
