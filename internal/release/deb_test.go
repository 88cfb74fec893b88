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
		"Maintainer: " + o.Maintainer + "\n", "conffiles", "postinst", "prerm", "postrm"} {
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
		`-rw-r--r-- root/root .* \./usr/share/doc/nodemgr/copyright$`,
		`-rw-r--r-- root/root .* \./usr/share/doc/nodemgr/changelog\.gz$`,
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
	t.Run("copyright", func(t *testing.T) { checkCopyright(t, o, root) })
	t.Run("changelog", func(t *testing.T) { checkChangelog(t, o, root) })
	t.Run("units verify", func(t *testing.T) { verifyUnits(t, root) })
}

// checkCopyright: the copyright file is DEP-5, names the maintainer and a
// license for nodemgr, and lists the modules compiled in with theirs.
func checkCopyright(t *testing.T, o Options, root string) {
	b, err := os.ReadFile(filepath.Join(root, docDir, "copyright"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	for _, want := range []string{
		`^Format: https://www\.debian\.org/doc/packaging-manuals/copyright-format/1\.0/\n`,
		`(?m)^Upstream-Name: nodemgr$`,
		`(?m)^Upstream-Contact: ` + regexp.QuoteMeta(o.Maintainer) + `$`,
		`(?m)^ std \(the Go standard library\) go[0-9.]+ BSD-3-Clause$`,
		`(?m)^ github\.com/spf13/cobra v[0-9.]+ Apache-2\.0$`,
		`(?m)^ golang\.org/x/sys v\S+ BSD-3-Clause$`,
		`(?m)^\nFiles: \*\nCopyright: .+\nLicense: \S+\n \S`,
	} {
		if !regexp.MustCompile(want).MatchString(text) {
			t.Errorf("copyright has nothing matching %s:\n%s", want, text)
		}
	}
	// Each line of a DEP-5 paragraph is a field or a continuation.
	for i, line := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
		if line != "" && !regexp.MustCompile(`^([A-Z][A-Za-z-]*: |\s\S)`).MatchString(line) {
			t.Errorf("copyright line %d %q is neither a field nor a continuation", i+1, line)
		}
	}
}

// checkChangelog: the changelog is gzipped and its one entry is this
// version's, signed by the maintainer.
func checkChangelog(t *testing.T, o Options, root string) {
	out, err := exec.Command("gzip", "-dc", filepath.Join(root, docDir, "changelog.gz")).Output()
	if err != nil {
		t.Fatalf("gzip -dc changelog.gz: %v", err)
	}
	want := `^nodemgr \(` + regexp.QuoteMeta(o.Version) + `\) unstable; urgency=medium\n\n  \* .*\n\n -- ` +
		regexp.QuoteMeta(o.Maintainer) + `  \w{3}, \d{2} \w{3} \d{4} \d{2}:\d{2}:\d{2} \+0000\n$`
	if !regexp.MustCompile(want).Match(out) {
		t.Errorf("changelog = %q, want it to match %s", out, want)
	}
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

// TestPostrmPurgeRemovesEnableLinks runs the package's postrm in a root of
// its own (DPKG_ROOT, as dpkg --root does): purge removes the links
// `systemctl enable` made for the units and nothing else; remove keeps
// them (the operator's choice survives a reinstall).
func TestPostrmPurgeRemovesEnableLinks(t *testing.T) {
	script, err := debian.ReadFile("debian/postrm")
	if err != nil {
		t.Fatal(err)
	}
	links := []string{
		"etc/systemd/system/multi-user.target.wants/" + serverUnit,
		"etc/systemd/system/multi-user.target.wants/" + agentUnit,
		"etc/systemd/system/network-online.target.requires/" + agentUnit,
	}
	other := "etc/systemd/system/multi-user.target.wants/ssh.service"
	for _, tc := range []struct {
		action string
		gone   bool
	}{
		{"remove", false},
		{"purge", true},
	} {
		t.Run(tc.action, func(t *testing.T) {
			root := t.TempDir()
			for _, l := range append(links, other) {
				p := filepath.Join(root, l)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.Symlink(unitDir+"/"+filepath.Base(l), p); err != nil {
					t.Fatal(err)
				}
			}
			cmd := exec.Command("sh", "-c", string(script), "postrm", tc.action)
			cmd.Env = append(os.Environ(), "DPKG_ROOT="+root)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("postrm %s: %v\n%s", tc.action, err, out)
			}
			for _, l := range links {
				_, err := os.Lstat(filepath.Join(root, l))
				if gone := os.IsNotExist(err); gone != tc.gone {
					t.Errorf("after postrm %s, /%s gone = %v, want %v", tc.action, l, gone, tc.gone)
				}
			}
			if _, err := os.Lstat(filepath.Join(root, other)); err != nil {
				t.Errorf("postrm %s removed another package's link /%s: %v", tc.action, other, err)
			}
		})
	}
}
