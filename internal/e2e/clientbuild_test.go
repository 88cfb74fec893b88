package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestClientBuild: the client build (-tags clientonly), which links no
// driver code, talks to a real server as the whole binary does: who am
// I, a command run on a machine the server made, and templates checked
// against the drivers' records alone, a misspelt provider key named.
func TestClientBuild(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "nodemgr-client")
	if out, err := exec.Command("go", "build", "-tags", "clientonly", "-o", bin, "github.com/nodemgr/nodemgr/cmd/nodemgr").CombinedOutput(); err != nil {
		t.Fatalf("go build -tags clientonly: %v\n%s", err, out)
	}
	s := startServer(t)
	run := func(args ...string) (string, string, int) {
		t.Helper()
		return s.runBinary(t, bin, "", "", args...)
	}

	if out, errOut, code := run("whoami"); code != 0 || !strings.Contains(out, "admin") {
		t.Fatalf("client whoami: exit %d: %s%s", code, out, errOut)
	}

	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	os.WriteFile(good, []byte("name: cb\nimage: debian:12\noverrides:\n  aws:\n    instance_type: t3.micro\n"), 0o600)
	if out, errOut, code := run("template", "validate", good); code != 0 {
		t.Fatalf("client template validate of a good template: exit %d: %s%s", code, out, errOut)
	}
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("name: cb\nimage: debian:12\noverrides:\n  aws:\n    instance_typ: t3.micro\n"), 0o600)
	if _, errOut, code := run("template", "validate", bad); code == 0 || !strings.Contains(errOut, "instance_typ") {
		t.Fatalf("client template validate of a misspelt aws key: exit %d, %q; want a failure naming instance_typ", code, errOut)
	}

	// A machine of the local provider, made with the whole binary; the
	// client runs a command on it.
	tmpl := filepath.Join(dir, "host.yaml")
	os.WriteFile(tmpl, []byte("name: cb-host\nimage: none\n"), 0o600)
	if out, errOut, code := s.run(t, "template", "apply", "-f", tmpl); code != 0 {
		t.Fatalf("template apply: %s%s", out, errOut)
	}
	if out, errOut, code := s.run(t, "provision", "--template", "cb-host", "--provider", "local", "--name", "cb-host"); code != 0 {
		t.Fatalf("provision: exit %d: %s%s", code, out, errOut)
	}
	if out, errOut, code := run("exec", "cb-host", "--", "echo", "from the client build"); code != 0 || out != "from the client build\n" {
		t.Fatalf("client exec: exit %d, %q, %q; want the command's output", code, out, errOut)
	}
}
