// Package dockertest gives tests a real Docker engine to work against: a
// client that skips the test when no engine is reachable (or fails it when
// NODEMGR_REQUIRE_DOCKER=1, as CI sets), a small busybox image built on
// the spot, since no registry is reachable, and labels that tie every
// container a test makes to that test so that none outlives it.
package dockertest

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/client"
)

// Image is the reference of the test image that EnsureImage builds: a
// static busybox with its applets linked into /bin, a root user and an
// unprivileged user "nodemgr" (uid and gid 1000, home /home/nodemgr).
const Image = "nodemgr-test/busybox:latest"

// BusyboxPath is the static busybox binary the image is made from
// (Debian's busybox-static).
const BusyboxPath = "/bin/busybox"

// LabelTest is the label that Labels sets; Cleanup removes what carries it.
const LabelTest = "nodemgr.test"

// layout versions the image's content; bump it when the rootfs changes so
// that an older image under the same tag is replaced.
const layout = "2"

const labelImage = "nodemgr.testimage"

// Client returns a client for the engine that DOCKER_HOST (or the local
// socket) names. When the engine cannot be reached the test is skipped,
// unless NODEMGR_REQUIRE_DOCKER=1, in which case it fails.
func Client(t testing.TB) *client.Client {
	t.Helper()
	c, err := client.New(client.FromEnv)
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err = c.Ping(ctx, client.PingOptions{NegotiateAPIVersion: true})
		cancel()
		if err != nil {
			c.Close()
		}
	}
	if err != nil {
		unavailable(t, "no docker engine: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv("NODEMGR_REQUIRE_DOCKER") == "1" {
		t.Fatalf("%s (NODEMGR_REQUIRE_DOCKER=1)", msg)
	}
	t.Skipf("%s; set NODEMGR_REQUIRE_DOCKER=1 to fail instead", msg)
}

var imageMu sync.Mutex

// EnsureImage makes sure the engine has Image, importing it from a rootfs
// built around BusyboxPath when it is missing or was built from another
// busybox or layout. It is cheap when the image is already there, and
// safe to call from parallel tests and test binaries.
func EnsureImage(t testing.TB, c *client.Client) string {
	t.Helper()
	imageMu.Lock()
	defer imageMu.Unlock()

	bb, err := os.ReadFile(BusyboxPath)
	if err != nil {
		unavailable(t, "test image needs a static busybox (Debian package busybox-static): %v", err)
	}
	sum := sha256.Sum256(bb)
	version := layout + "-" + hex.EncodeToString(sum[:8])

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if img, err := c.ImageInspect(ctx, Image); err == nil && img.Config != nil && img.Config.Labels[labelImage] == version {
		return Image
	}

	applets, err := applets()
	if err != nil {
		t.Fatalf("list busybox applets: %v", err)
	}
	rootfs, err := rootfs(bb, applets)
	if err != nil {
		t.Fatalf("build test image rootfs: %v", err)
	}
	resp, err := c.ImageImport(ctx, client.ImageImportSource{Source: bytes.NewReader(rootfs), SourceName: "-"}, Image,
		client.ImageImportOptions{
			Message: "nodemgr test image: static busybox",
			Changes: []string{
				"ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
				`CMD ["/bin/sh"]`,
				"LABEL " + labelImage + "=" + version,
			},
		})
	if err != nil {
		t.Fatalf("import test image %s: %v", Image, err)
	}
	out, err := io.ReadAll(resp)
	resp.Close()
	if err != nil {
		t.Fatalf("import test image %s: %v", Image, err)
	}
	// The import answers 200 and reports failures inside its JSON stream.
	if bytes.Contains(out, []byte(`"error"`)) {
		t.Fatalf("import test image %s: %s", Image, out)
	}
	return Image
}

func applets() ([]string, error) {
	out, err := exec.Command(BusyboxPath, "--list").Output()
	if err != nil {
		return nil, err
	}
	var names []string
	for _, n := range strings.Fields(string(out)) {
		if n != "busybox" && !strings.Contains(n, "/") {
			names = append(names, n)
		}
	}
	return names, nil
}

// rootfs returns the image's root file system as a tar archive.
func rootfs(busybox []byte, applets []string) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	mtime := time.Unix(0, 0)
	dir := func(name string, mode int64, uid int) error {
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: mode, Uid: uid, Gid: uid, ModTime: mtime})
	}
	file := func(name string, mode int64, body []byte) error {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(body)), ModTime: mtime}); err != nil {
			return err
		}
		_, err := tw.Write(body)
		return err
	}
	for _, d := range []struct {
		name string
		mode int64
		uid  int
	}{
		{"bin", 0o755, 0}, {"dev", 0o755, 0}, {"etc", 0o755, 0}, {"home", 0o755, 0},
		{"home/nodemgr", 0o755, 1000}, {"proc", 0o555, 0}, {"root", 0o700, 0},
		{"sys", 0o555, 0}, {"tmp", 0o1777, 0}, {"usr", 0o755, 0}, {"usr/bin", 0o755, 0},
		{"var", 0o755, 0}, {"var/tmp", 0o1777, 0},
	} {
		if err := dir(d.name, d.mode, d.uid); err != nil {
			return nil, err
		}
	}
	if err := file("bin/busybox", 0o755, busybox); err != nil {
		return nil, err
	}
	for _, a := range applets {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: "bin/" + a, Linkname: "busybox", Mode: 0o777, ModTime: mtime}); err != nil {
			return nil, err
		}
	}
	for _, f := range []struct{ name, body string }{
		{"etc/passwd", "root:x:0:0:root:/root:/bin/sh\nnodemgr:x:1000:1000:nodemgr:/home/nodemgr:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"},
		{"etc/group", "root:x:0:\nnodemgr:x:1000:\nnogroup:x:65534:\n"},
	} {
		if err := file(f.name, 0o644, []byte(f.body)); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Labels returns a label unique to this test, and removes every container
// that carries it when the test ends, so that a failing test leaves
// nothing behind. Give the labels to whatever the test provisions.
func Labels(t testing.TB, c *client.Client) map[string]string {
	t.Helper()
	b := make([]byte, 6)
	rand.Read(b)
	labels := map[string]string{LabelTest: sanitize(t.Name()) + "-" + hex.EncodeToString(b)}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for _, s := range Containers(t, c, labels) {
			if _, err := c.ContainerRemove(ctx, s.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true}); err != nil {
				t.Errorf("remove leftover container %s: %v", s.ID, err)
			}
		}
	})
	return labels
}

// Containers lists every container, running or not, that carries all the
// labels.
func Containers(t testing.TB, c *client.Client, labels map[string]string) []ContainerSummary {
	t.Helper()
	f := client.Filters{}
	for k, v := range labels {
		f.Add("label", k+"="+v)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := c.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: f})
	if err != nil {
		t.Fatalf("list containers %v: %v", labels, err)
	}
	out := make([]ContainerSummary, 0, len(res.Items))
	for _, s := range res.Items {
		out = append(out, ContainerSummary{ID: s.ID, Names: s.Names, State: string(s.State), Labels: s.Labels})
	}
	return out
}

// ContainerSummary is what Containers reports of a container.
type ContainerSummary struct {
	ID     string
	Names  []string
	State  string
	Labels map[string]string
}

// Name returns a container name unique to this test and call.
func Name(t testing.TB) string {
	b := make([]byte, 4)
	rand.Read(b)
	n := sanitize(t.Name())
	if len(n) > 40 {
		n = n[len(n)-40:]
	}
	return "nodemgr-test-" + strings.Trim(n, "-_.") + "-" + hex.EncodeToString(b)
}

// sanitize keeps what Docker allows in names and label values.
func sanitize(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '.':
			return r
		}
		return '_'
	}, s)
}
