package libvirt_test

import (
	"bytes"
	"context"
	"crypto/md5"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/nodemgr/nodemgr/internal/drivers/execute"
	sshexec "github.com/nodemgr/nodemgr/internal/drivers/execute/ssh"
	"github.com/nodemgr/nodemgr/internal/drivers/provision"
	"github.com/nodemgr/nodemgr/internal/drivers/provision/libvirt"
	"github.com/nodemgr/nodemgr/internal/drivers/provision/libvirt/libvirttest"
)

// A real guest under QEMU's emulation (TCG): a Debian kernel booted
// directly with an initramfs that runs sshd, on user-mode networking. It
// is provisioned (ready when sshd's banner comes), reached through the ssh
// executor as the deployment says (Address, ssh_user; the guest's host
// key checked against known_hosts), with its user data on the NoCloud
// seed; a file is copied there and back; then it is stopped, started,
// hibernated, restored, rebooted and terminated.
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

	ex := executor(t, g, dep.Address)
	sh := func(cmd string) string {
		t.Helper()
		var out, errb bytes.Buffer
		code, err := ex.Exec(ctx, dep, execute.Command{Argv: []string{"sh", "-c", cmd}, Stdout: &out, Stderr: &errb, Timeout: time.Minute})
		if err != nil || code != 0 {
			t.Fatalf("exec %q = %d, %v: %s", cmd, code, err, errb.Bytes())
		}
		return out.String()
	}
	// waitSSH waits for the guest's sshd after a start, through the executor.
	waitSSH := func(after string) {
		t.Helper()
		start := time.Now()
		for {
			actx, cancel := context.WithTimeout(ctx, 30*time.Second) // a key exchange on a loaded TCG guest is slow
			code, err := ex.Exec(actx, dep, execute.Command{Argv: []string{"true"}})
			cancel()
			if err == nil && code == 0 {
				t.Logf("exec over ssh %s after %s", after, time.Since(start).Round(time.Millisecond))
				return
			}
			if time.Since(start) > 2*time.Minute {
				t.Fatalf("no ssh %s: %d, %v", after, code, err)
			}
			time.Sleep(500 * time.Millisecond)
		}
	}

	// The banner answered; the first key exchange may still take long on
	// a loaded TCG guest, so wait for it as the orchestrator does.
	waitSSH("after provisioning")
	if out := sh("uname -m; cat /mnt/seed/user-data; cat /mnt/seed/meta-data"); !strings.Contains(out, "x86_64\n"+userData) ||
		!strings.Contains(out, "instance-id: "+dep.ResourceID) || !strings.Contains(out, "local-hostname: "+name) {
		t.Errorf("guest says %q, want x86_64, the user data and the meta-data (instance %s) from the NoCloud seed", out, dep.ResourceID)
	}
	// A file there and back.
	local := t.TempDir()
	payload := bytes.Repeat([]byte("nodemgr\x00\xff"), 10000)
	if err := os.WriteFile(filepath.Join(local, "payload"), payload, 0o640); err != nil {
		t.Fatal(err)
	}
	if err := ex.CopyTo(ctx, dep, filepath.Join(local, "payload"), "/tmp/in/payload"); err != nil {
		t.Fatalf("CopyTo: %v", err)
	}
	if out := sh("md5sum /tmp/in/payload"); !strings.HasPrefix(out, fmt.Sprintf("%x ", md5sum(payload))) {
		t.Errorf("md5sum of the copied file on the guest = %q, want %x", out, md5sum(payload))
	}
	if err := ex.CopyFrom(ctx, dep, "/tmp/in/payload", filepath.Join(local, "back")); err != nil {
		t.Fatalf("CopyFrom: %v", err)
	}
	if back, err := os.ReadFile(filepath.Join(local, "back")); err != nil || !bytes.Equal(back, payload) {
		t.Errorf("the file copied back differs (%d bytes, %v; want %d)", len(back), err, len(payload))
	}

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
	waitSSH("after stop and start")
	if out := sh("test -e /tmp/in/payload && echo kept || echo fresh"); out != "fresh\n" {
		t.Errorf("after stop and start, the guest's tmpfs says %q, want fresh: it did not boot afresh", out)
	}
	sh("echo kept > /tmp/marker")

	if took := step(provision.VerbHibernate, provision.StateHibernated); took > time.Minute {
		t.Errorf("hibernate took %s", took)
	}
	step(provision.VerbStart, provision.StateRunning)
	waitSSH("after hibernate and start")
	if out := sh("cat /tmp/marker"); out != "kept\n" {
		t.Errorf("after hibernate and start, /tmp/marker = %q, want its memory restored (kept)", out)
	}

	step(provision.VerbReboot, provision.StateRunning)
	waitSSH("after reboot")
	if out := sh("test -e /tmp/marker && echo kept || echo gone"); out != "gone\n" {
		t.Errorf("after reboot, /tmp/marker is %q, want gone: a fresh boot", out)
	}

	step(provision.VerbTerminate, provision.StateTerminated)
	if libvirttest.VolumeExists(t, h.Conn, h.Pool, name+"-cidata.iso") {
		t.Errorf("terminate left the seed volume")
	}
}

// executor is an ssh executor that logs in with the guest's key and knows
// its host key at addr, and no other.
func executor(t *testing.T, g libvirttest.Guest, addr string) *sshexec.SSH {
	t.Helper()
	dir := t.TempDir()
	key, known := filepath.Join(dir, "id_ed25519"), filepath.Join(dir, "known_hosts")
	if err := os.WriteFile(key, g.Key, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(known, []byte(knownhosts.Line([]string{knownhosts.Normalize(addr)}, g.HostKey)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ex, err := sshexec.New(map[string]string{"identity_file": key, "known_hosts": known,
		"connect_timeout": "30s"}) // a key exchange on a TCG guest under a loaded CI machine took over 5s
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ex.Close() })
	return ex
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

func md5sum(b []byte) [16]byte { return md5.Sum(b) }
