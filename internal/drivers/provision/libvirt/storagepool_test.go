package libvirt_test

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	golibvirt "github.com/digitalocean/go-libvirt"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/drivers/provision"
	"github.com/nodemgr/nodemgr/internal/drivers/provision/libvirt"
	"github.com/nodemgr/nodemgr/internal/drivers/provision/libvirt/libvirttest"
)

// poolName is a storage pool name unique to this run, whose pool (if any
// is made) is removed, with its volumes, when the test ends.
func poolName(t *testing.T, conn *golibvirt.Libvirt) string {
	t.Helper()
	b := make([]byte, 4)
	rand.Read(b)
	name := "nodemgr-test-made-" + hex.EncodeToString(b)
	t.Cleanup(func() {
		pool, err := conn.StoragePoolLookupByName(name)
		if err != nil {
			return
		}
		if vols, _, err := conn.StoragePoolListAllVolumes(pool, 1, 0); err == nil {
			for _, v := range vols {
				conn.StorageVolDelete(v, 0)
			}
		}
		conn.StoragePoolDestroy(pool)
		conn.StoragePoolUndefine(pool)
	})
	return name
}

// checkMadePool checks that the pool exists, runs, starts with the
// daemon and keeps its volumes in dir.
func checkMadePool(t *testing.T, conn *golibvirt.Libvirt, name, dir string) {
	t.Helper()
	pool, err := conn.StoragePoolLookupByName(name)
	if err != nil {
		t.Fatalf("pool %s was not made: %v", name, err)
	}
	active, err := conn.StoragePoolIsActive(pool)
	if err != nil || active != 1 {
		t.Errorf("pool %s active = %d, %v; want running", name, active, err)
	}
	auto, err := conn.StoragePoolGetAutostart(pool)
	if err != nil || auto != 1 {
		t.Errorf("pool %s autostart = %d, %v; want on", name, auto, err)
	}
	doc, err := conn.StoragePoolGetXMLDesc(pool, 0)
	var px libvirt.PoolXML
	if err == nil {
		err = xmlUnmarshal(doc, &px)
	}
	if err != nil || px.Type != "dir" || px.Target == nil || px.Target.Path != dir {
		t.Errorf("pool %s: %+v, %v; want a dir pool in %s", name, px, err, dir)
	}
}

// TestProvisionMakesItsMissingPool: the provider's own pool (the pool
// setting) is made when the daemon lacks it, as a directory pool at
// pool_dir, and started again when stopped; machines' volumes go there.
func TestProvisionMakesItsMissingPool(t *testing.T) {
	conn := libvirttest.TestDriver(t)
	name, dir := poolName(t, conn), filepath.Join(t.TempDir(), "images")
	p, _, labels := setup(t, map[string]string{"pool": name, "pool_dir": dir})
	ctx := libvirttest.Context(t, time.Minute)
	extra := map[string]any{"kernel": "/k/vmlinuz", "initrd": "/k/initrd", "diskMB": 64}

	m := libvirttest.Name(t)
	dep, err := p.Provision(ctx, provision.Spec{Name: m, Labels: labels, Extra: extra})
	if err != nil {
		t.Fatalf("Provision with no pool %s: %v", name, err)
	}
	checkMadePool(t, conn, name, dir)
	if !libvirttest.VolumeExists(t, conn, name, m+".qcow2") {
		t.Errorf("the machine's disk is not in the pool made for it")
	}
	if err := p.Destroy(ctx, dep); err != nil {
		t.Fatalf("Destroy: %v", err)
	}

	pool, _ := conn.StoragePoolLookupByName(name)
	if err := conn.StoragePoolDestroy(pool); err != nil {
		t.Fatalf("stop pool %s: %v", name, err)
	}
	m = libvirttest.Name(t)
	dep, err = p.Provision(ctx, provision.Spec{Name: m, Labels: labels, Extra: extra})
	if err != nil {
		t.Fatalf("Provision with pool %s stopped: %v", name, err)
	}
	p.Destroy(ctx, dep)
	checkMadePool(t, conn, name, dir)
}

// TestProvisionRefusesAMissingTemplatePool: a pool that a template names
// (extra.pool) is not made, nor started: the refusal gives the virsh
// commands that would.
func TestProvisionRefusesAMissingTemplatePool(t *testing.T) {
	p, conn, labels := setup(t)
	ctx := libvirttest.Context(t, time.Minute)
	name := poolName(t, conn)
	extra := map[string]any{"kernel": "/k/vmlinuz", "diskMB": 64, "pool": name}
	_, err := p.Provision(ctx, provision.Spec{Name: libvirttest.Name(t), Labels: labels, Extra: extra})
	virsh := "virsh -c " + p.URI() + " "
	for _, want := range []string{`storage pool "` + name + `" not found`, virsh + "pool-define-as " + name + " dir --target /var/lib/libvirt/" + name,
		virsh + "pool-build " + name, virsh + "pool-start " + name, virsh + "pool-autostart " + name} {
		if !errors.Is(err, errdefs.ErrNotFound) || !strings.Contains(err.Error(), want) {
			t.Errorf("Provision in missing pool %s = %v; want not found, saying %q", name, err, want)
		}
	}
	if _, err := conn.StoragePoolLookupByName(name); err == nil {
		t.Errorf("pool %s, which a template named, was made", name)
	}

	doc := `<pool type='dir'><name>` + name + `</name><target><path>/tmp/` + name + `</path></target></pool>`
	if _, err := conn.StoragePoolDefineXML(doc, 0); err != nil {
		t.Fatalf("define pool %s: %v", name, err)
	}
	_, err = p.Provision(ctx, provision.Spec{Name: libvirttest.Name(t), Labels: labels, Extra: extra})
	if !errors.Is(err, errdefs.ErrConflict) || !strings.Contains(err.Error(), virsh+"pool-start "+name) {
		t.Errorf("Provision in stopped pool %s = %v; want a conflict saying %q", name, err, virsh+"pool-start "+name)
	}
}

// TestQEMUMakesItsMissingPool: on the real daemon, the pool made for the
// provider has its directory built; a directory that cannot be made
// leaves no pool, and the error says which step failed and what to run.
func TestQEMUMakesItsMissingPool(t *testing.T) {
	h := libvirttest.QEMU(t)
	ctx := libvirttest.Context(t, time.Minute)
	extra := map[string]any{"kernel": "/nonexistent/vmlinuz", "diskMB": 64}

	name, dir := poolName(t, h.Conn), filepath.Join(h.Dir, "made")
	p, err := libvirt.New(map[string]string{"uri": h.URI, "pool": name, "pool_dir": dir, "ready_timeout": "0"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	// QEMU cannot start a missing kernel: the pool is made before that.
	if _, err := p.Provision(ctx, provision.Spec{Name: libvirttest.Name(t), Extra: extra}); err == nil || !strings.Contains(err.Error(), "start domain") {
		t.Errorf("Provision = %v, want the pool made and the start refused", err)
	}
	checkMadePool(t, h.Conn, name, dir)
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		t.Errorf("pool %s's directory %s: %v, %v; want it built", name, dir, fi, err)
	}

	name = poolName(t, h.Conn)
	bad := "/proc/nodemgr-no-such/images"
	p, err = libvirt.New(map[string]string{"uri": h.URI, "pool": name, "pool_dir": bad, "ready_timeout": "0"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	_, err = p.Provision(ctx, provision.Spec{Name: libvirttest.Name(t), Extra: extra})
	if err == nil || !strings.Contains(err.Error(), "making it failed at pool-build") || !strings.Contains(err.Error(), "pool-define-as "+name+" dir --target "+bad) {
		t.Errorf("Provision with pool_dir %s = %v; want the failed step and the virsh commands", bad, err)
	}
	if _, err := h.Conn.StoragePoolLookupByName(name); err == nil {
		t.Errorf("a pool that could not be built, %s, is left defined", name)
	}
}
