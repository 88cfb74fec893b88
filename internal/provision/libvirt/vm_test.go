package libvirt_test

import (
	"bytes"
	"context"
	"crypto/md5"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/nodemgr/nodemgr/internal/provision"
	"github.com/nodemgr/nodemgr/internal/provision/libvirt"
	"github.com/nodemgr/nodemgr/internal/provision/libvirt/libvirttest"
)

// A real guest under QEMU's emulation (TCG): a Debian kernel booted
// directly with an initramfs that runs sshd, on user-mode networking. It
// is provisioned (ready when sshd's banner comes), reached over SSH with
// its user data on the NoCloud seed, then stopped, started, rebooted,
// hibernated, restored and terminated.
//
// The commands and the file copy go through golang.org/x/crypto/ssh here:
// the ssh executor (internal/execute/ssh) was not in the tree yet.
func TestGuestOverTCG(t *testing.T) {
	if testing.Short() {
		t.Skip("boots a VM")
	}
	h := libvirttest.QEMU(t)
	g := libvirttest.NewGuest(t, h.Dir)
	s := h.Settings()
	s["stop_timeout"] = "20s"
	s["ready_timeout"] = "2m"
	p, err := libvirt.New(s)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	ctx := libvirttest.Context(t, 8*time.Minute)

	name := libvirttest.Name(t)
	console := filepath.Join(h.Dir, name+".console.log")
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(console)
			t.Logf("guest console (%s):\n%s", console, tail(string(b), 4000))
		}
	})
	userData := "#cloud-config\nnodemgr_test: " + name + "\n"
	spec := provision.Spec{Name: name, Template: "tiny", Labels: libvirttest.Labels(t), Extra: map[string]any{
		"kernel": g.Kernel, "initrd": g.Initrd, "cmdline": g.Cmdline,
		"cpu": 1, "memoryMB": 256, "user": g.User, "user_data": userData, "console_log": console,
	}}

	start := time.Now()
	dep, err := p.Provision(ctx, spec)
	if err != nil {
		t.Fatalf("Provision: %v", err)
	}
	t.Cleanup(func() { p.Destroy(context.Background(), dep) })
	t.Logf("provisioned in %s: SSH banner at %s", time.Since(start).Round(time.Millisecond), dep.Address)
	if !strings.HasPrefix(dep.Address, "127.0.0.1:") || dep.Extra["ssh_user"] != g.User {
		t.Errorf("Address %q, ssh_user %v; want 127.0.0.1:<port> and %s", dep.Address, dep.Extra["ssh_user"], g.User)
	}

	c := dial(t, ctx, dep.Address, g)
	if out := run(t, c, "uname -m; cat /mnt/seed/user-data; cat /mnt/seed/meta-data"); !strings.Contains(out, "x86_64\n"+userData) ||
		!strings.Contains(out, "instance-id: "+dep.ResourceID) || !strings.Contains(out, "local-hostname: "+name) {
		t.Errorf("guest says %q, want x86_64, the user data and the meta-data (instance %s) from the NoCloud seed", out, dep.ResourceID)
	}
	// A file there and back.
	payload := bytes.Repeat([]byte("nodemgr\x00\xff"), 10000)
	if out := runIn(t, c, "cat > /tmp/payload && md5sum /tmp/payload", payload); !strings.Contains(out, fmt.Sprintf("%x", md5sum(payload))) {
		t.Errorf("copied file's md5sum on the guest = %q, want %x", out, md5sum(payload))
	}
	if out := run(t, c, "cat /tmp/payload"); out != string(payload) {
		t.Errorf("the file read back differs (%d bytes, want %d)", len(out), len(payload))
	}
	c.Close()

	step := func(verb, want string) time.Duration {
		t.Helper()
		start := time.Now()
		if err := provision.Do(ctx, p, verb, dep); err != nil {
			t.Fatalf("%s: %v", verb, err)
		}
		took := time.Since(start)
		if st, err := p.State(ctx, dep); err != nil || st != want {
			t.Fatalf("after %s, State = %q, %v; want %s", verb, st, err, want)
		}
		t.Logf("%s: %s in %s", verb, want, took.Round(time.Millisecond))
		return took
	}
	// Stop is graceful: the guest powers off on the ACPI button, well
	// within the grace.
	if took := step(provision.VerbStop, provision.StateStopped); took > 15*time.Second {
		t.Errorf("stop took %s: the guest did not answer the power button, it was powered off", took)
	}
	step(provision.VerbStart, provision.StateRunning)
	c = dial(t, ctx, dep.Address, g)
	if again := run(t, c, "cat /run/booted; test -e /tmp/payload || echo fresh"); !strings.HasSuffix(again, "fresh\n") {
		t.Errorf("after stop and start, the guest kept its tmpfs (%q): it did not boot afresh", again)
	}
	run(t, c, "echo kept > /tmp/marker")
	c.Close()

	if took := step(provision.VerbHibernate, provision.StateHibernated); took > time.Minute {
		t.Errorf("hibernate took %s", took)
	}
	step(provision.VerbStart, provision.StateRunning)
	c = dial(t, ctx, dep.Address, g)
	if out := run(t, c, "cat /tmp/marker"); out != "kept\n" {
		t.Errorf("after hibernate and start, /tmp/marker = %q, want its memory restored (kept)", out)
	}
	before := run(t, c, "cat /run/booted")
	c.Close()

	step(provision.VerbReboot, provision.StateRunning)
	c = dial(t, ctx, dep.Address, g)
	if out := run(t, c, "test -e /tmp/marker && echo still || echo gone"); out != "gone\n" {
		t.Errorf("after reboot, /tmp/marker is %q, want gone (a fresh boot; booted %q, then %q)", out, before, run(t, c, "cat /run/booted"))
	}
	c.Close()

	step(provision.VerbTerminate, provision.StateTerminated)
	for _, v := range []string{name + "-cidata.iso"} {
		if libvirttest.VolumeExists(t, h.Conn, h.Pool, v) {
			t.Errorf("terminate left volume %s", v)
		}
	}
}

// dial connects to the guest's sshd, retrying while it boots.
func dial(t *testing.T, ctx context.Context, addr string, g libvirttest.Guest) *ssh.Client {
	t.Helper()
	start := time.Now()
	for {
		c, err := dialOnce(addr, g)
		if err == nil {
			t.Logf("ssh to %s after %s", addr, time.Since(start).Round(time.Millisecond))
			return c
		}
		select {
		case <-ctx.Done():
			t.Fatalf("ssh to %s: %v", addr, err)
		case <-time.After(500 * time.Millisecond):
		}
		if time.Since(start) > 2*time.Minute {
			t.Fatalf("ssh to %s: %v", addr, err)
		}
	}
}

// dialOnce connects with a deadline on the handshake too: QEMU's user-mode
// networking accepts a connection while the guest is still booting and
// holds it until its own connect to the guest gives up.
func dialOnce(addr string, g libvirttest.Guest) (*ssh.Client, error) {
	conn, err := net.DialTimeout("tcp", addr, 3*time.Second)
	if err != nil {
		return nil, err
	}
	conn.SetDeadline(time.Now().Add(3 * time.Second))
	cc, chans, reqs, err := ssh.NewClientConn(conn, addr, g.ClientConfig())
	if err != nil {
		conn.Close()
		return nil, err
	}
	conn.SetDeadline(time.Time{})
	return ssh.NewClient(cc, chans, reqs), nil
}

func run(t *testing.T, c *ssh.Client, cmd string) string { t.Helper(); return runIn(t, c, cmd, nil) }

func runIn(t *testing.T, c *ssh.Client, cmd string, stdin []byte) string {
	t.Helper()
	s, err := c.NewSession()
	if err != nil {
		t.Fatalf("ssh session: %v", err)
	}
	defer s.Close()
	if stdin != nil {
		s.Stdin = bytes.NewReader(stdin)
	}
	var out, errb bytes.Buffer
	s.Stdout, s.Stderr = &out, &errb
	if err := s.Run(cmd); err != nil {
		t.Fatalf("ssh %q: %v: %s", cmd, err, errb.Bytes())
	}
	return out.String()
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

func md5sum(b []byte) [16]byte { return md5.Sum(b) }
