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
	sshtest.Need(t, "ssh")
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
// address (OpenSSH refuses a jump host that is the target itself): the
// jump reads the same ssh_config (known_hosts, key).
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
	// The checks' connection and rsync's ssh: two through the jump.
	if n := p.Accepted(); n != 2 {
		t.Errorf("the jump host took %d connections, want 2", n)
	}
}

// TestHostKeyChecked checks that rsync's ssh checks the host key against
// the executor's known_hosts, and that its refusal names the file: the
// key is taken out of the file once the checks' connection is open.
func TestHostKeyChecked(t *testing.T) {
	srv := sshtest.Shared(t)
	kh := srv.KnownHostsFile(t, srv.Addr)
	r, d, _ := node(t, map[string]string{"known_hosts": kh})
	ctx := ctxFor(t)
	src := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(src, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "f")
	if err := r.CopyTo(ctx, d, src, dst); err != nil {
		t.Fatalf("CopyTo = %v", err)
	}
	if err := os.WriteFile(kh, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	err := r.CopyTo(ctx, d, src, dst)
	if !errors.Is(err, errdefs.ErrPermission) || !strings.Contains(err.Error(), "Host key verification failed") || !strings.Contains(err.Error(), kh) {
		t.Errorf("CopyTo with the key gone from known_hosts = %v, want permission denied naming %s", err, kh)
	}
}

// TestExecNeedsSSH checks that commands go through the ssh executor,
// which a deployment with copy:rsync alone does not carry, while copies
// need only copy:rsync.
func TestExecNeedsSSH(t *testing.T) {
	r, d, _ := node(t, nil)
	sshtest.CopyOnly(t, r, d)
}

func TestSSHConfig(t *testing.T) {
	tg := ssh.Target{User: "ops", Host: "fe80::1", Port: 2222, IdentityFiles: []string{"/keys/my key", "/k/%h"},
		KnownHosts: "/kh", AcceptNewHostKeys: true, ConnectTimeout: 15 * time.Second,
		Jump: &ssh.Target{User: "hop", Host: "bastion", Port: 22}}
	got, err := rsync.SSHConfig(tg)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"HostName fe80::1\n", "Port 2222\n", "User ops\n", "ProxyJump hop@bastion:22\n", "UserKnownHostsFile /kh\n",
		"StrictHostKeyChecking accept-new\n", `IdentityFile "/keys/my key"` + "\n", "IdentityFile /k/%%h\n", "IdentitiesOnly yes\n", "BatchMode yes\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("SSHConfig(%v) has no %q:\n%s", tg, want, got)
		}
	}
	tg.KnownHosts = `/a"b`
	if _, err := rsync.SSHConfig(tg); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("SSHConfig with a quote in a path = %v, want invalid", err)
	}
}
