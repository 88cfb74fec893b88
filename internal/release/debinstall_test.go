package release

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/internal/drivers/provision/docker/dockertest"
)

// The Debian the package is installed into: a minbase bookworm with
// systemd (for systemd-analyze), made by debootstrap from the Debian
// mirror, since no container registry is reachable, and imported into
// the engine. The rootfs tarball is cached across runs like the test
// kernel (NODEMGR_TEST_CACHE, default ~/.cache/nodemgr-test).
const (
	debianSuite   = "bookworm"
	debianImage   = "nodemgr-test/debian:" + debianSuite
	debianTarball = "debian-" + debianSuite + "-minbase-systemd.tar"
)

func testCache(t *testing.T) string {
	dir := os.Getenv("NODEMGR_TEST_CACHE")
	if dir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			t.Fatal(err)
		}
		dir = filepath.Join(home, ".cache", "nodemgr-test")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// debianRootfs is the cached rootfs tarball, made with debootstrap when
// missing. Without debootstrap the test skips, or fails where
// NODEMGR_REQUIRE_DEBIAN=1.
func debianRootfs(t *testing.T) string {
	t.Helper()
	tarball := filepath.Join(testCache(t), debianTarball)
	if _, err := os.Stat(tarball); err == nil {
		return tarball
	}
	deboot, err := exec.LookPath("debootstrap")
	if err != nil {
		msg := "debootstrap is not installed (Debian's debootstrap): no Debian rootfs to install the package in"
		if os.Getenv("NODEMGR_REQUIRE_DEBIAN") == "1" {
			t.Fatal(msg + " (NODEMGR_REQUIRE_DEBIAN=1)")
		}
		t.Skip(msg + "; set NODEMGR_REQUIRE_DEBIAN=1 to fail instead")
	}
	mirror := os.Getenv("NODEMGR_DEBIAN_MIRROR")
	if mirror == "" {
		mirror = "http://deb.debian.org/debian"
	}
	root := t.TempDir()
	start := time.Now()
	out, err := exec.Command(deboot, "--variant=minbase", "--include=systemd", debianSuite, root, mirror).CombinedOutput()
	if err != nil {
		t.Fatalf("debootstrap %s from %s: %v\n%s", debianSuite, mirror, err, lastLines(string(out), 20))
	}
	tmp := tarball + ".tmp"
	if out, err := exec.Command("tar", "-C", root, "-cf", tmp, ".").CombinedOutput(); err != nil {
		t.Fatalf("tar the rootfs: %v\n%s", err, out)
	}
	if err := os.Rename(tmp, tarball); err != nil {
		t.Fatal(err)
	}
	t.Logf("made the Debian rootfs in %s (cached in %s)", time.Since(start).Round(time.Second), tarball)
	return tarball
}

// debianImageRef imports the rootfs into the engine unless an image of
// this tarball is there already.
func debianImageRef(t *testing.T, tarball string) string {
	t.Helper()
	st, err := os.Stat(tarball)
	if err != nil {
		t.Fatal(err)
	}
	stamp := fmt.Sprintf("%d-%d", st.Size(), st.ModTime().Unix())
	out, err := exec.Command("docker", "image", "inspect", "-f", `{{index .Config.Labels "nodemgr.rootfs"}}`, debianImage).Output()
	if err == nil && strings.TrimSpace(string(out)) == stamp {
		return debianImage
	}
	cmd := exec.Command("docker", "import", "-c", "LABEL nodemgr.rootfs="+stamp, "-c", `CMD ["/bin/sh"]`,
		"-c", "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", tarball, debianImage)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("docker import %s: %v\n%s", tarball, err, out)
	}
	return debianImage
}

// container is a running Debian container the test drives with docker exec.
type container struct {
	t    *testing.T
	name string
}

func startDebian(t *testing.T, image, pkgDir string) *container {
	t.Helper()
	b := make([]byte, 4)
	rand.Read(b)
	c := &container{t: t, name: "nodemgr-debtest-" + hex.EncodeToString(b)}
	out, err := exec.Command("docker", "run", "-d", "--name", c.name, "--label", dockertest.LabelTest+"="+t.Name(),
		"-v", pkgDir+":/pkg:ro", image, "sleep", "infinity").CombinedOutput()
	if err != nil {
		t.Fatalf("docker run %s: %v\n%s", image, err, out)
	}
	t.Cleanup(func() { exec.Command("docker", "rm", "-f", c.name).Run() })
	return c
}

// sh runs script in the container as user, failing the test on error.
func (c *container) sh(user, script string) string {
	c.t.Helper()
	out, err := c.try(user, script)
	if err != nil {
		c.t.Fatalf("in the container, as %s: %s\n%v\n%s", user, script, err, out)
	}
	return out
}

func (c *container) try(user, script string) (string, error) {
	out, err := exec.Command("docker", "exec", "-u", user, c.name, "sh", "-c", script).CombinedOutput()
	return string(out), err
}

// startDaemon starts argv in the background as user, its output in log.
func (c *container) startDaemon(user, log string, env []string, argv []string) {
	c.t.Helper()
	args := []string{"exec", "-d", "-u", user}
	for _, e := range env {
		args = append(args, "-e", e)
	}
	script := strings.Join(argv, " ") + " >" + log + " 2>&1"
	args = append(args, c.name, "sh", "-c", script)
	if out, err := exec.Command("docker", args...).CombinedOutput(); err != nil {
		c.t.Fatalf("start %s: %v\n%s", script, err, out)
	}
}

// waitFor polls script until it succeeds, or fails the test with logs.
func (c *container) waitFor(what, user, script string, timeout time.Duration, logs ...string) string {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		out, err := c.try(user, script)
		if err == nil {
			return out
		}
		if time.Now().After(deadline) {
			for _, l := range logs {
				lo, _ := c.try("root", "cat "+l)
				c.t.Logf("--- %s ---\n%s", l, lo)
			}
			c.t.Fatalf("%s: not within %s: %v\n%s", what, timeout, err, out)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// unit is what the test reads of a systemd unit: how systemd would start it.
type unit struct {
	execStart, user, stateDir string
}

func readUnit(t *testing.T, text string) unit {
	t.Helper()
	var u unit
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), "=")
		if !ok || strings.HasPrefix(k, "#") {
			continue
		}
		switch k {
		case "ExecStart":
			u.execStart = v
		case "User":
			u.user = v
		case "StateDirectory":
			u.stateDir = "/var/lib/" + v
		}
	}
	if u.execStart == "" || u.stateDir == "" {
		t.Fatalf("unit without ExecStart or StateDirectory:\n%s", text)
	}
	if u.user == "" {
		u.user = "root"
	}
	return u
}

// prepare does for a unit what systemd does before ExecStart: make its
// state directory, owned by its user, private.
func (c *container) prepare(u unit) {
	c.t.Helper()
	c.sh("root", fmt.Sprintf("install -d -m 0700 -o %s -g %s %s", u.user, groupOf(u.user), u.stateDir))
}

func groupOf(user string) string {
	if user == "root" {
		return "root"
	}
	return user
}

// TestDebInstallsInDebian installs the package in a fresh Debian
// container, checks what postinst did, verifies the units with the
// binary in place, starts the server from its unit's ExecStart with the
// packaged config, as the unit's user, then an agent from the same
// package (its packaged config given the server's URL and a join token,
// as an operator would), and waits for the agent's node to be online.
// There is no systemd running in the container: the test does what the
// units tell systemd to do.
func TestDebInstallsInDebian(t *testing.T) {
	needDpkgDeb(t)
	dockertest.Client(t) // skips, or fails under NODEMGR_REQUIRE_DOCKER=1, without an engine
	t0 := time.Now()
	image := debianImageRef(t, debianRootfs(t))
	tImage := time.Since(t0)
	o, a := buildHere(t)
	deb := debOf(t, o, a)
	tBuild := time.Since(t0) - tImage
	c := startDebian(t, image, filepath.Dir(deb))

	c.sh("root", "dpkg -i /pkg/"+filepath.Base(deb))
	if got := c.sh("root", "id -u nodemgr >/dev/null && getent passwd nodemgr | cut -d: -f6,7"); strings.TrimSpace(got) != "/var/lib/nodemgr/server:/usr/sbin/nologin" {
		t.Errorf("the nodemgr user's home and shell = %q, want /var/lib/nodemgr/server:/usr/sbin/nologin", got)
	}
	if got := c.sh("root", "stat -c '%U:%G %a' /etc/nodemgr/server.yaml /etc/nodemgr/agent.yaml"); got != "root:nodemgr 640\nroot:root 600\n" {
		t.Errorf("config owners and modes = %q, want root:nodemgr 640 (server), root:root 600 (agent)", got)
	}
	if out := c.sh("root", "systemd-analyze verify --man=no /usr/lib/systemd/system/nodemgr-server.service /usr/lib/systemd/system/nodemgr-agent.service 2>&1"); strings.TrimSpace(out) != "" {
		t.Errorf("systemd-analyze verify in the container:\n%s", out)
	}
	c.sh("root", "nodemgr --version | grep -F '"+o.Version+"'")
	c.sh("root", "bash -n /usr/share/bash-completion/completions/nodemgr")

	server := readUnit(t, c.sh("root", "cat /usr/lib/systemd/system/nodemgr-server.service"))
	c.prepare(server)
	printed := c.sh(server.user, server.execStart+" --print-config")
	if !regexp.MustCompile(`(?m)^data_dir: /var/lib/nodemgr/server\s+# default$`).MatchString(printed) {
		t.Errorf("server --print-config from the packaged config:\n%s", printed)
	}
	c.startDaemon(server.user, "/tmp/server.log", nil, strings.Fields(server.execStart))
	admin := server.stateDir + "/admin-token"
	c.waitFor("the server's admin token", "root", "test -s "+admin, 30*time.Second, "/tmp/server.log")
	client := "NODEMGR_TOKEN_FILE=" + admin + " nodemgr "
	c.waitFor("the server answering", "root", client+"whoami", 30*time.Second, "/tmp/server.log")
	owners := `for p in /proc/[0-9]*; do [ "$(cat $p/comm 2>/dev/null)" = nodemgr ] && stat -c %U $p; done; true`
	if got := c.sh("root", owners); strings.TrimSpace(got) != "nodemgr" {
		t.Errorf("nodemgr processes run as %q, want one, the server, as the nodemgr user", got)
	}

	agent := readUnit(t, c.sh("root", "cat /usr/lib/systemd/system/nodemgr-agent.service"))
	c.prepare(agent)
	// Saved to a file, the command writes the secret alone (the banner goes
	// to stderr): the file is a token file as it is.
	c.sh("root", "umask 077 && "+client+"join-token create --name debtest --max-uses 1 > /etc/nodemgr/join-token")
	// What an operator does with the packaged agent.yaml: uncomment two lines.
	c.sh("root", `sed -i 's|^#server: ""$|server: http://127.0.0.1:7070|; s|^#join_token_file: ""$|join_token_file: /etc/nodemgr/join-token|; s|^#name: ""$|name: debtest|' /etc/nodemgr/agent.yaml`)
	c.startDaemon(agent.user, "/tmp/agent.log", nil, strings.Fields(agent.execStart))
	c.waitFor("the agent's node online", "root", client+"node ls | grep -E '^n-[a-z0-9]+ +debtest +online'", 60*time.Second, "/tmp/server.log", "/tmp/agent.log")

	// Enabled by the operator, the units' links go with a purge.
	c.sh("root", "systemctl enable nodemgr-server.service nodemgr-agent.service 2>&1")
	c.sh("root", "test -L /etc/systemd/system/multi-user.target.wants/nodemgr-agent.service")
	c.sh("root", "dpkg --purge nodemgr")
	if out := c.sh("root", "ls /etc/systemd/system/*.wants/ | grep nodemgr || true"); strings.TrimSpace(out) != "" {
		t.Errorf("after dpkg --purge, enable links are left:\n%s", out)
	}
	t.Logf("rootfs image %s, build %s, install to node online %s", tImage.Round(time.Second), tBuild.Round(time.Second),
		(time.Since(t0) - tImage - tBuild).Round(time.Second))
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
