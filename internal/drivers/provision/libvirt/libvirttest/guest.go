package libvirttest

import (
	"archive/tar"
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"golang.org/x/crypto/ssh"
)

// Guest is a tiny Linux guest that boots in seconds under TCG: a Debian
// kernel and an initramfs around static busybox that loads the virtio
// drivers, configures QEMU user-mode networking (10.0.2.15), mounts a
// NoCloud seed disk if there is one (on /mnt/seed) and runs the host's
// sshd, with sftp-server and rsync when the host has them. It powers off
// on the ACPI power button, as a real distribution does.
type Guest struct {
	Kernel  string // paths in the Host's directory
	Initrd  string
	Cmdline string
	User    string     // root
	Signer  ssh.Signer // authorized for User
	Key     []byte     // Signer's private key, PEM (OpenSSH format)
	HostKey ssh.PublicKey
}

// Modules are the kernel modules the guest loads, in order.
var Modules = []string{
	"virtio_ring", "virtio", "virtio_pci_legacy_dev", "virtio_pci_modern_dev", "virtio_pci",
	"failover", "net_failover", "virtio_net", "virtio_blk", "cdrom", "isofs", "evdev", "button",
}

// KernelPackage is the pattern of the Debian kernel packages the guest
// boots: linux-image-6.1.0-<abi>-amd64.
var KernelPackage = regexp.MustCompile(`^linux-image-6\.1\.0-([0-9]+)-amd64$`)

// CacheDir is where downloaded kernels are kept between runs:
// $NODEMGR_TEST_CACHE, else $XDG_CACHE_HOME/nodemgr-test, else
// ~/.cache/nodemgr-test.
func CacheDir() string {
	if d := os.Getenv("NODEMGR_TEST_CACHE"); d != "" {
		return d
	}
	if d := os.Getenv("XDG_CACHE_HOME"); d != "" {
		return filepath.Join(d, "nodemgr-test")
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".cache", "nodemgr-test")
}

// NewGuest puts a guest's kernel and initramfs into dir (which QEMU must
// be able to read). The kernel comes from a Debian package: the one
// $NODEMGR_TEST_KERNEL_DEB names, else the newest linux-image-6.1.0-*-amd64
// .deb in CacheDir, else one that apt-get downloads there. Without a
// kernel, sshd or an amd64 host the test is Unavailable.
func NewGuest(t testing.TB, dir string) Guest {
	t.Helper()
	if runtime.GOARCH != "amd64" {
		Unavailable(t, "the test guest is an amd64 Debian kernel; this host is %s", runtime.GOARCH)
	}
	k, err := kernel()
	if err != nil {
		Unavailable(t, "no kernel for the test guest: %v", err)
	}
	_, hostPriv, _ := ed25519.GenerateKey(rand.Reader)
	_, userPriv, _ := ed25519.GenerateKey(rand.Reader)
	hostSigner, _ := ssh.NewSignerFromKey(hostPriv)
	userSigner, _ := ssh.NewSignerFromKey(userPriv)
	hostPEM, err := ssh.MarshalPrivateKey(hostPriv, "")
	if err != nil {
		t.Fatal(err)
	}
	userPEM, err := ssh.MarshalPrivateKey(userPriv, "")
	if err != nil {
		t.Fatal(err)
	}

	img, err := initramfs(k.modules, pem.EncodeToMemory(hostPEM), ssh.MarshalAuthorizedKey(userSigner.PublicKey()))
	if err != nil {
		Unavailable(t, "build the test guest's initramfs: %v", err)
	}
	g := Guest{
		Kernel:  filepath.Join(dir, "vmlinuz"),
		Initrd:  filepath.Join(dir, "initrd.cpio"),
		Cmdline: "console=ttyS0 panic=-1 rdinit=/init",
		User:    "root",
		Signer:  userSigner,
		Key:     pem.EncodeToMemory(userPEM),
		HostKey: hostSigner.PublicKey(),
	}
	kb, err := os.ReadFile(k.vmlinuz)
	if err != nil {
		t.Fatal(err)
	}
	for f, b := range map[string][]byte{g.Kernel: kb, g.Initrd: img} {
		if err := os.WriteFile(f, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return g
}

// ClientConfig is an SSH client configuration for the guest: its user,
// key and host key.
func (g Guest) ClientConfig() *ssh.ClientConfig {
	return &ssh.ClientConfig{User: g.User, Auth: []ssh.AuthMethod{ssh.PublicKeys(g.Signer)}, HostKeyCallback: ssh.FixedHostKey(g.HostKey)}
}

type kernelFiles struct {
	vmlinuz string
	modules map[string]string // name → path of the .ko
}

var kernelMu sync.Mutex

// kernel finds (downloading if need be) and unpacks the guest's kernel.
func kernel() (kernelFiles, error) {
	kernelMu.Lock()
	defer kernelMu.Unlock()
	cache := CacheDir()
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return kernelFiles{}, err
	}
	deb := os.Getenv("NODEMGR_TEST_KERNEL_DEB")
	if deb == "" {
		var err error
		if deb, err = cachedDeb(cache); err != nil {
			return kernelFiles{}, err
		}
	}
	out := filepath.Join(cache, strings.TrimSuffix(filepath.Base(deb), ".deb"))
	k := kernelFiles{vmlinuz: filepath.Join(out, "vmlinuz"), modules: map[string]string{}}
	for _, m := range Modules {
		k.modules[m] = filepath.Join(out, m+".ko")
	}
	if _, err := os.Stat(filepath.Join(out, "complete")); err == nil {
		return k, nil
	}
	if err := unpackKernel(deb, out); err != nil {
		return kernelFiles{}, fmt.Errorf("unpack %s: %w", deb, err)
	}
	return k, nil
}

// cachedDeb is the newest kernel package in the cache, downloaded with
// apt-get if there is none.
func cachedDeb(cache string) (string, error) {
	newest := func() string {
		debs, _ := filepath.Glob(filepath.Join(cache, "linux-image-6.1.0-*-amd64_*.deb"))
		best, bestABI := "", -1
		for _, d := range debs {
			pkg, _, _ := strings.Cut(filepath.Base(d), "_")
			if m := KernelPackage.FindStringSubmatch(pkg); m != nil {
				if abi, _ := strconv.Atoi(m[1]); abi > bestABI {
					best, bestABI = d, abi
				}
			}
		}
		return best
	}
	if d := newest(); d != "" {
		return d, nil
	}
	if _, err := exec.LookPath("apt-get"); err != nil {
		return "", fmt.Errorf("no linux-image-6.1.0-*-amd64 .deb in %s, and no apt-get to download one", cache)
	}
	out, err := exec.Command("apt-cache", "search", "--names-only", `^linux-image-6\.1\.0-[0-9]+-amd64$`).Output()
	if err != nil {
		return "", fmt.Errorf("apt-cache search: %w", err)
	}
	pkg, bestABI := "", -1
	for _, line := range strings.Split(string(out), "\n") {
		name, _, _ := strings.Cut(line, " ")
		if m := KernelPackage.FindStringSubmatch(name); m != nil {
			if abi, _ := strconv.Atoi(m[1]); abi > bestABI {
				pkg, bestABI = name, abi
			}
		}
	}
	if pkg == "" {
		return "", fmt.Errorf("apt-cache knows no linux-image-6.1.0-*-amd64 (apt-get update?)")
	}
	cmd := exec.Command("apt-get", "download", pkg)
	cmd.Dir = cache
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("apt-get download %s: %v: %s", pkg, err, b)
	}
	if d := newest(); d != "" {
		return d, nil
	}
	return "", fmt.Errorf("apt-get download %s left no .deb in %s", pkg, cache)
}

// unpackKernel takes vmlinuz and the guest's modules out of a kernel
// package (dpkg-deb reads the .deb; only those files are written).
func unpackKernel(deb, out string) error {
	tmp, err := os.MkdirTemp(filepath.Dir(out), ".unpack-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	cmd := exec.Command("dpkg-deb", "--fsys-tarfile", deb)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("dpkg-deb (Debian's dpkg): %w", err)
	}
	want := map[string]bool{}
	for _, m := range Modules {
		want[m+".ko"] = true
	}
	found := map[string]bool{}
	tr := tar.NewReader(stdout)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			cmd.Process.Kill()
			cmd.Wait()
			return err
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		name := path.Clean(strings.TrimPrefix(h.Name, "./"))
		base := path.Base(name)
		dst := ""
		switch {
		case strings.HasPrefix(name, "boot/vmlinuz-"):
			dst = "vmlinuz"
		case strings.HasPrefix(name, "lib/modules/") && want[base]:
			dst = base
		default:
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			cmd.Process.Kill()
			cmd.Wait()
			return err
		}
		if err := os.WriteFile(filepath.Join(tmp, dst), b, 0o644); err != nil {
			return err
		}
		found[dst] = true
	}
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("dpkg-deb: %v: %s", err, stderr.Bytes())
	}
	for _, f := range append([]string{"vmlinuz"}, slices.Collect(func(yield func(string) bool) {
		for k := range want {
			if !yield(k) {
				return
			}
		}
	})...) {
		if !found[f] {
			return fmt.Errorf("the package has no %s", f)
		}
	}
	if err := os.WriteFile(filepath.Join(tmp, "complete"), nil, 0o644); err != nil {
		return err
	}
	os.RemoveAll(out)
	return os.Rename(tmp, out)
}

// initScript is the guest's /init.
const initScript = `#!/bin/busybox sh
/bin/busybox mkdir -p /proc /sys /dev /run /tmp /mnt/seed /usr/bin /usr/sbin /sbin /var/empty /root
/bin/busybox --install -s
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mkdir -p /dev/pts && mount -t devpts devpts /dev/pts
mount -t tmpfs run /run
for m in ` + "%s" + `; do insmod /lib/modules/$m.ko || echo "nodemgr-guest: insmod $m failed"; done
ip link set lo up
ip link set eth0 up && ip addr add 10.0.2.15/24 dev eth0 && ip route add default via 10.0.2.2
for d in /dev/vd?; do
	[ -b "$d" ] && mount -t iso9660 -o ro "$d" /mnt/seed 2>/dev/null && break
done
# Power off on the ACPI power button, as acpid does on a real system.
for e in /sys/class/input/event*; do
	if grep -q "Power Button" "$e/device/name" 2>/dev/null; then
		(head -c 1 "/dev/input/${e##*/}" >/dev/null; echo "nodemgr-guest: power button"; sync; poweroff -f) &
	fi
done
mkdir -p /run/sshd && chmod 0755 /run/sshd
date +%%s > /run/booted
/usr/sbin/sshd -e -f /etc/ssh/sshd_config && echo "nodemgr-guest: sshd started"
while :; do sleep 3600; done
`

const sshdConfig = `Port 22
HostKey /etc/ssh/ssh_host_ed25519_key
PermitRootLogin yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
AuthorizedKeysFile /root/.ssh/authorized_keys
PidFile /run/sshd.pid
Subsystem sftp /usr/lib/openssh/sftp-server
`

// initramfs builds the guest's initramfs (an uncompressed newc cpio).
func initramfs(modules map[string]string, hostKey, authorizedKey []byte) ([]byte, error) {
	w := newCPIO()
	for _, d := range []string{"bin", "sbin", "usr", "usr/bin", "usr/sbin", "lib", "lib/modules", "etc", "etc/ssh", "root", "root/.ssh", "dev", "proc", "sys", "run", "tmp", "mnt", "var", "var/empty"} {
		w.dir(d, 0o755)
	}
	bb, err := os.ReadFile("/bin/busybox")
	if err != nil {
		return nil, fmt.Errorf("static busybox (Debian's busybox-static): %w", err)
	}
	w.file("bin/busybox", 0o755, bb)
	w.file("init", 0o755, []byte(fmt.Sprintf(initScript, strings.Join(Modules, " "))))
	for _, m := range Modules {
		b, err := os.ReadFile(modules[m])
		if err != nil {
			return nil, err
		}
		w.file("lib/modules/"+m+".ko", 0o644, b)
	}

	progs := []string{"/usr/sbin/sshd"}
	if _, err := os.Stat("/usr/sbin/sshd"); err != nil {
		return nil, fmt.Errorf("sshd (Debian's openssh-server): %w", err)
	}
	for _, p := range []string{"/usr/lib/openssh/sftp-server", "/usr/bin/rsync"} {
		if _, err := os.Stat(p); err == nil {
			progs = append(progs, p)
		}
	}
	done := map[string]bool{}
	for _, p := range progs {
		files, err := withLibraries(p)
		if err != nil {
			return nil, err
		}
		for _, f := range files {
			if done[f] {
				continue
			}
			done[f] = true
			b, err := os.ReadFile(f) // through symlinks: the guest gets the file itself
			if err != nil {
				return nil, err
			}
			rel := strings.TrimPrefix(f, "/")
			w.parents(rel)
			w.file(rel, 0o755, b)
		}
	}

	w.file("etc/passwd", 0o644, []byte("root:x:0:0:root:/root:/bin/sh\nsshd:x:100:65534::/run/sshd:/usr/sbin/nologin\n"))
	w.file("etc/group", 0o644, []byte("root:x:0:\nnogroup:x:65534:\n"))
	w.file("etc/shadow", 0o600, []byte("root:*:19000:0:99999:7:::\nsshd:*:19000:0:99999:7:::\n"))
	w.file("etc/nsswitch.conf", 0o644, []byte("passwd: files\ngroup: files\nshadow: files\n"))
	w.file("etc/ssh/sshd_config", 0o644, []byte(sshdConfig))
	w.file("etc/ssh/ssh_host_ed25519_key", 0o600, hostKey)
	w.file("root/.ssh/authorized_keys", 0o600, authorizedKey)
	return w.close(), nil
}

// withLibraries is a program and the shared libraries ldd says it loads.
func withLibraries(prog string) ([]string, error) {
	out, err := exec.Command("ldd", prog).Output()
	if err != nil {
		return nil, fmt.Errorf("ldd %s: %w", prog, err)
	}
	files := []string{prog}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) >= 3 && f[1] == "=>" && strings.HasPrefix(f[2], "/"):
			files = append(files, f[2])
		case len(f) >= 1 && strings.HasPrefix(f[0], "/"):
			files = append(files, f[0]) // the dynamic loader
		}
	}
	return files, nil
}

// cpio writes a newc archive.
type cpio struct {
	buf  bytes.Buffer
	ino  int
	dirs map[string]bool
}

func newCPIO() *cpio { return &cpio{dirs: map[string]bool{}} }

func (c *cpio) entry(name string, mode uint32, data []byte) {
	c.ino++
	fmt.Fprintf(&c.buf, "070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		c.ino, mode, 0, 0, 1, 0, len(data), 0, 0, 0, 0, len(name)+1, 0)
	c.buf.WriteString(name)
	c.buf.WriteByte(0)
	c.pad()
	c.buf.Write(data)
	c.pad()
}

func (c *cpio) pad() {
	for c.buf.Len()%4 != 0 {
		c.buf.WriteByte(0)
	}
}

func (c *cpio) dir(name string, perm uint32) {
	if c.dirs[name] {
		return
	}
	c.dirs[name] = true
	c.entry(name, 0o040000|perm, nil)
}

// parents adds the directories above a path.
func (c *cpio) parents(rel string) {
	var acc []string
	for _, p := range strings.Split(path.Dir(rel), "/") {
		if p == "." || p == "" {
			continue
		}
		acc = append(acc, p)
		c.dir(strings.Join(acc, "/"), 0o755)
	}
}

func (c *cpio) file(name string, perm uint32, data []byte) {
	c.entry(name, 0o100000|perm, data)
}

func (c *cpio) close() []byte {
	c.entry("TRAILER!!!", 0, nil)
	for c.buf.Len()%512 != 0 {
		c.buf.WriteByte(0)
	}
	return c.buf.Bytes()
}
