package release

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"github.com/nodemgr/nodemgr/internal/cli"
)

// debOf is the .deb Build made beside a's binary.
func debOf(t *testing.T, o Options, a Artifact) string {
	t.Helper()
	matches, _ := filepath.Glob(filepath.Join(o.OutDir, "nodemgr_"+o.Version+"_"+a.Target.Arch+".deb"))
	if len(matches) != 1 {
		t.Fatalf("no nodemgr_%s_%s.deb in %s", o.Version, a.Target.Arch, o.OutDir)
	}
	return matches[0]
}

func needDpkgDeb(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("dpkg-deb"); err != nil {
		t.Skip("dpkg-deb is not installed (Debian's dpkg)")
	}
}

func dpkgDeb(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("dpkg-deb", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("dpkg-deb %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func TestDebContents(t *testing.T) {
	needDpkgDeb(t)
	o, a := buildHere(t)
	deb := debOf(t, o, a)

	info := dpkgDeb(t, "-I", deb)
	for _, want := range []string{"Package: nodemgr", "Version: " + o.Version, "Architecture: " + runtime.GOARCH,
		"conffiles", "postinst", "prerm", "postrm"} {
		if !strings.Contains(info, want) {
			t.Errorf("dpkg-deb -I does not show %q:\n%s", want, info)
		}
	}
	list := dpkgDeb(t, "-c", deb)
	for _, want := range []string{
		`-rwxr-xr-x root/root .* \./usr/bin/nodemgr$`,
		`\./etc/nodemgr/server\.yaml$`,
		`\./etc/nodemgr/agent\.yaml$`,
		`\./usr/lib/systemd/system/nodemgr-server\.service$`,
		`\./usr/lib/systemd/system/nodemgr-agent\.service$`,
		`\./usr/share/bash-completion/completions/nodemgr$`,
		`\./usr/share/zsh/vendor-completions/_nodemgr$`,
		`\./usr/share/fish/vendor_completions\.d/nodemgr\.fish$`,
	} {
		if !regexp.MustCompile(`(?m)` + want).MatchString(list) {
			t.Errorf("dpkg-deb -c lists nothing matching %s:\n%s", want, list)
		}
	}
	conffiles := dpkgDeb(t, "-I", deb, "conffiles")
	if conffiles != "/etc/nodemgr/agent.yaml\n/etc/nodemgr/server.yaml\n" && conffiles != "/etc/nodemgr/server.yaml\n/etc/nodemgr/agent.yaml\n" {
		t.Errorf("conffiles = %q, want the two configs", conffiles)
	}

	root := t.TempDir()
	dpkgDeb(t, "-x", deb, root)
	for daemon, path := range map[string]string{"server": ServerConfPath, "agent": AgentConfPath} {
		want, err := cli.ConfigTemplate(daemon)
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := os.ReadFile(filepath.Join(root, path)); !bytes.Equal(got, want) {
			t.Errorf("%s is not cli.ConfigTemplate(%q)", path, daemon)
		}
	}
	bash, _ := os.ReadFile(filepath.Join(root, "usr/share/bash-completion/completions/nodemgr"))
	if !bytes.Contains(bash, []byte("__start_nodemgr")) {
		t.Errorf("the bash completion is not cobra's script for nodemgr")
	}
	t.Run("units verify", func(t *testing.T) { verifyUnits(t, root) })
}

// verifyUnits runs systemd-analyze verify on the packaged units. It
// checks that ExecStart's binary exists and is executable on this
// machine, so the units are verified with the binary where they say it is
// only when that is so; TestDebInstallsInDebian verifies them in a Debian
// with the package installed.
func verifyUnits(t *testing.T, root string) {
	sa, err := exec.LookPath("systemd-analyze")
	if err != nil {
		if os.Getenv("NODEMGR_REQUIRE_DEBIAN") == "1" {
			t.Fatal("systemd-analyze is not installed (Debian's systemd; NODEMGR_REQUIRE_DEBIAN=1)")
		}
		t.Skip("systemd-analyze is not installed (Debian's systemd)")
	}
	// The units as they are, but for ExecStart's path, which
	// systemd-analyze requires to exist here.
	dir := t.TempDir()
	bin := filepath.Join(root, "usr/bin/nodemgr")
	for _, unit := range []string{serverUnit, agentUnit} {
		b, err := os.ReadFile(filepath.Join(root, unitDir, unit))
		if err != nil {
			t.Fatal(err)
		}
		b = bytes.ReplaceAll(b, []byte("ExecStart=/usr/bin/nodemgr "), []byte("ExecStart="+bin+" "))
		os.WriteFile(filepath.Join(dir, unit), b, 0o644)
	}
	cmd := exec.Command(sa, "verify", "--man=no", filepath.Join(dir, serverUnit), filepath.Join(dir, agentUnit))
	if out, err := cmd.CombinedOutput(); err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
}
