package libvirttest

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/xml"
	"os"
	"path/filepath"
	"strings"
	"testing"

	golibvirt "github.com/digitalocean/go-libvirt"

	"github.com/nodemgr/nodemgr/internal/drivers/provision/libvirt"
)

// Host is the daemon's QEMU driver with a storage pool of the test's own,
// in a directory that QEMU (which runs as another user) can read; kernels,
// initrds and console logs go there too.
type Host struct {
	Conn *golibvirt.Libvirt
	URI  string
	Pool string // the test's storage pool
	Dir  string // readable by QEMU; the pool's volumes are in Dir/pool
}

// QEMU connects to qemu:///system and makes a transient storage pool for
// the test, destroyed (with its volumes) when the test ends. A daemon
// without QEMU for x86_64 or aarch64 is Unavailable.
func QEMU(t testing.TB) *Host {
	t.Helper()
	l := Connect(t, QEMUURI)
	caps, err := l.ConnectGetCapabilities()
	if err != nil {
		Unavailable(t, "capabilities of %s: %v", QEMUURI, err)
	}
	if !strings.Contains(caps, "<domain type='qemu'") {
		Unavailable(t, "%s offers no QEMU emulator (install qemu-system-x86)", QEMUURI)
	}

	dir, err := os.MkdirTemp("", "nodemgr-libvirt-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	poolDir := filepath.Join(dir, "pool")
	for _, d := range []string{dir, poolDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d, 0o755); err != nil { // MkdirTemp makes it 0700
			t.Fatal(err)
		}
	}
	b := make([]byte, 4)
	rand.Read(b)
	name := "nodemgr-test-" + hex.EncodeToString(b)
	doc, err := xml.Marshal(libvirt.PoolXML{Type: "dir", Name: name, Target: &libvirt.PoolTarget{Path: poolDir}})
	if err != nil {
		t.Fatal(err)
	}
	pool, err := l.StoragePoolCreateXML(string(doc), 0)
	if err != nil {
		t.Fatalf("create storage pool %s: %v", name, err)
	}
	t.Cleanup(func() {
		if vols, _, err := l.StoragePoolListAllVolumes(pool, 1, 0); err == nil {
			for _, v := range vols {
				l.StorageVolDelete(v, 0)
			}
		}
		l.StoragePoolDestroy(pool)
	})
	return &Host{Conn: l, URI: withSocket(QEMUURI), Pool: name, Dir: dir}
}

// Settings are provider settings for the host: its pool, TCG.
func (h *Host) Settings() map[string]string {
	return map[string]string{"uri": h.URI, "pool": h.Pool, "domain_type": "qemu"}
}

// InactiveNetwork defines an isolated network that is never started and
// undefines it when the test ends; it returns its name.
func (h *Host) InactiveNetwork(t testing.TB) string {
	t.Helper()
	b := make([]byte, 4)
	rand.Read(b)
	name := "nodemgr-test-" + hex.EncodeToString(b)
	doc, err := xml.Marshal(libvirt.NetworkXML{Name: name})
	if err != nil {
		t.Fatal(err)
	}
	n, err := h.Conn.NetworkDefineXML(string(doc))
	if err != nil {
		t.Fatalf("define network %s: %v", name, err)
	}
	t.Cleanup(func() { h.Conn.NetworkUndefine(n) })
	return name
}
