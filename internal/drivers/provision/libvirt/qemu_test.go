package libvirt_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/drivers/provision"
	"github.com/nodemgr/nodemgr/internal/drivers/provision/libvirt"
	"github.com/nodemgr/nodemgr/internal/drivers/provision/libvirt/libvirttest"
)

// The storage layouts under the real QEMU driver, which checks what the
// test driver lets pass: a qcow2 layer over a base image with the NoCloud
// seed uploaded beside it, and an installer ISO on a SCSI CD-ROM with a
// blank disk. The guests boot nothing worth waiting for (ready_timeout
// 0); QEMU must accept the domain and run it, and Destroy must take the
// volumes it made and leave the others.
func TestQEMUStorage(t *testing.T) {
	h := libvirttest.QEMU(t)
	s := h.Settings()
	s["ready_timeout"] = "0"
	s["stop_timeout"] = "1s"
	p, err := libvirt.New(s)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	ctx := libvirttest.Context(t, 2*time.Minute)

	base := libvirttest.Name(t) + "-base.qcow2"
	libvirttest.CreateVolume(t, h.Conn, h.Pool, `<volume><name>`+base+`</name><capacity unit='MiB'>64</capacity><target><format type='qcow2'/></target></volume>`)
	iso := libvirttest.Name(t) + "-installer.iso"
	vol := libvirttest.CreateVolume(t, h.Conn, h.Pool, `<volume><name>`+iso+`</name><capacity unit='bytes'>0</capacity><target><format type='raw'/></target></volume>`)
	content := bytes.Repeat([]byte{0}, 1<<20)
	if err := h.Conn.StorageVolUpload(vol, bytes.NewReader(content), 0, uint64(len(content)), 0); err != nil {
		t.Fatalf("upload %s: %v", iso, err)
	}

	for _, tc := range []struct {
		name  string
		extra map[string]any
		made  []string // volume suffixes
	}{
		{"base image and seed", map[string]any{"base_image": base, "diskGB": 1, "user_data": "#cloud-config\n", "user": "debian"}, []string{".qcow2", "-cidata.iso"}},
		{"installer", map[string]any{"iso": iso, "diskMB": 256}, []string{".qcow2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := libvirttest.Name(t)
			dep, err := p.Provision(ctx, provision.Spec{Name: name, Labels: libvirttest.Labels(t), Extra: tc.extra})
			if err != nil {
				t.Fatalf("Provision: %v", err)
			}
			t.Cleanup(func() { p.Destroy(context.Background(), dep) })
			if st, err := p.State(ctx, dep); err != nil || st != provision.StateRunning {
				t.Errorf("State = %q, %v, want running", st, err)
			}
			for _, suffix := range tc.made {
				if !libvirttest.VolumeExists(t, h.Conn, h.Pool, name+suffix) {
					t.Errorf("no volume %s%s", name, suffix)
				}
			}
			if err := p.Destroy(ctx, dep); err != nil {
				t.Fatalf("Destroy: %v", err)
			}
			for _, suffix := range tc.made {
				if libvirttest.VolumeExists(t, h.Conn, h.Pool, name+suffix) {
					t.Errorf("Destroy left volume %s%s", name, suffix)
				}
			}
			for _, v := range []string{base, iso} {
				if !libvirttest.VolumeExists(t, h.Conn, h.Pool, v) {
					t.Errorf("Destroy removed %s, which it did not make", v)
				}
			}
			if left := libvirttest.Domains(t, h.Conn, map[string]string{libvirt.LabelDeployment: name}); len(left) != 0 {
				t.Errorf("Destroy left %v", left)
			}
		})
	}

	// A network that is not active is refused before anything is made.
	name := libvirttest.Name(t)
	_, err = p.Provision(ctx, provision.Spec{Name: name, Extra: map[string]any{"base_image": base, "network": h.InactiveNetwork(t)}})
	if !errors.Is(err, errdefs.ErrConflict) || !strings.Contains(err.Error(), "is not active") {
		t.Errorf("Provision on an inactive network = %v, want a conflict saying so", err)
	}
	if left := libvirttest.Domains(t, h.Conn, map[string]string{libvirt.LabelDeployment: name}); len(left) != 0 {
		t.Errorf("a refused Provision left %v", left)
	}

	// A domain QEMU cannot start (no such kernel) leaves nothing.
	name = libvirttest.Name(t)
	_, err = p.Provision(ctx, provision.Spec{Name: name, Extra: map[string]any{"kernel": "/nonexistent/vmlinuz", "diskMB": 64}})
	if err == nil || !strings.Contains(err.Error(), "start domain") {
		t.Errorf("Provision with a missing kernel = %v, want the start refused", err)
	}
	if left := libvirttest.Domains(t, h.Conn, map[string]string{libvirt.LabelDeployment: name}); len(left) != 0 || libvirttest.VolumeExists(t, h.Conn, h.Pool, name+".qcow2") {
		t.Errorf("a failed start left %v, or its disk", left)
	}
}
