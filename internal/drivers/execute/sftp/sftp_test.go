package sftp_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/internal/drivers/execute/executetest"
	"github.com/nodemgr/nodemgr/internal/drivers/execute/sftp"
	"github.com/nodemgr/nodemgr/internal/drivers/execute/ssh"
	"github.com/nodemgr/nodemgr/internal/drivers/execute/ssh/sshtest"
	"github.com/nodemgr/nodemgr/internal/drivers/provision"
)

func TestMain(m *testing.M) { os.Exit(sshtest.Main(m)) }

func node(t *testing.T) (*sftp.SFTP, provision.Deployment, *sshtest.Server) {
	t.Helper()
	return sshtest.Executor(t, sftp.New, nil, ssh.Capability, sftp.Capability)
}

func TestConformance(t *testing.T) {
	executetest.Run(t, func(t *testing.T) executetest.Target {
		f, d, srv := node(t)
		return srv.Target(f, d)
	})
}

// TestExecNeedsSSH checks that commands go through the ssh executor,
// which a deployment with copy:sftp alone does not carry.
func TestExecNeedsSSH(t *testing.T) {
	f, d, _ := node(t)
	sshtest.CopyOnly(t, f, d)
}

// TestNoWriteThroughLinks checks that a link on the machine where the
// copied tree has a directory is replaced, not written through.
func TestNoWriteThroughLinks(t *testing.T) {
	f, d, _ := node(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	src := executetest.Tree(t, t.TempDir(), "tree")
	// The machine here is this host: its paths are local paths.
	remote := t.TempDir()
	outside := filepath.Join(remote, "outside")
	if err := os.Mkdir(outside, 0o755); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(remote, "copy")
	if err := os.MkdirAll(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(dst, "sub")); err != nil {
		t.Fatal(err)
	}
	if err := f.CopyTo(ctx, d, src, dst); err != nil {
		t.Fatalf("CopyTo = %v", err)
	}
	if fi, err := os.Lstat(filepath.Join(dst, "sub")); err != nil || !fi.IsDir() {
		t.Errorf("sub on the machine after the copy: %v, %v; want a directory", fi, err)
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 0 {
		t.Errorf("the copy wrote through the link into %s: %v", outside, ents)
	}
	// No temporary file is left behind.
	filepath.WalkDir(dst, func(p string, de os.DirEntry, err error) error {
		if err == nil && strings.HasPrefix(de.Name(), ".nodemgr-") {
			t.Errorf("temporary %s left on the machine", p)
		}
		return nil
	})
}
