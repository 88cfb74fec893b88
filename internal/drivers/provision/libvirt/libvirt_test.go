package libvirt_test

import (
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	golibvirt "github.com/digitalocean/go-libvirt"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/drivers/mapping"
	"github.com/nodemgr/nodemgr/internal/drivers/provision"
	"github.com/nodemgr/nodemgr/internal/drivers/provision/libvirt"
	"github.com/nodemgr/nodemgr/internal/drivers/provision/libvirt/libvirttest"
	"github.com/nodemgr/nodemgr/internal/drivers/provision/provisiontest"
)

// setup returns a provider on the test driver, a connection of the test's
// own to check its work with, and labels that tie machines to the test.
func setup(t *testing.T, settings ...map[string]string) (*libvirt.Libvirt, *golibvirt.Libvirt, map[string]string) {
	t.Helper()
	conn := libvirttest.TestDriver(t)
	s := libvirttest.TestSettings()
	for _, o := range settings {
		maps.Copy(s, o)
	}
	p, err := libvirt.New(s)
	if err != nil {
		t.Fatalf("libvirt.New(%v): %v", s, err)
	}
	t.Cleanup(func() { p.Close() })
	return p, conn, libvirttest.Labels(t)
}

// baseVolume makes a qcow2 volume to use as a base image.
func baseVolume(t *testing.T, conn *golibvirt.Libvirt, mib int) string {
	t.Helper()
	name := libvirttest.Name(t) + "-base.qcow2"
	libvirttest.CreateVolume(t, conn, libvirttest.TestPool,
		fmt.Sprintf(`<volume><name>%s</name><capacity unit='MiB'>%d</capacity><target><format type='qcow2'/></target></volume>`, name, mib))
	return name
}

func domainXML(t *testing.T, conn *golibvirt.Libvirt, uuid string) libvirt.DomainXML {
	t.Helper()
	dom := lookup(t, conn, uuid)
	doc, err := conn.DomainGetXMLDesc(dom, 0)
	if err != nil {
		t.Fatalf("DomainGetXMLDesc(%s): %v", uuid, err)
	}
	var dx libvirt.DomainXML
	if err := xmlUnmarshal(doc, &dx); err != nil {
		t.Fatalf("read domain XML: %v\n%s", err, doc)
	}
	return dx
}

func lookup(t *testing.T, conn *golibvirt.Libvirt, uuid string) golibvirt.Domain {
	t.Helper()
	doms, _, err := conn.ConnectListAllDomains(1, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range doms {
		if uuidString(d.UUID) == uuid {
			return d
		}
	}
	t.Fatalf("no domain %s", uuid)
	return golibvirt.Domain{}
}

func domainExists(t *testing.T, conn *golibvirt.Libvirt, name string) bool {
	t.Helper()
	_, err := conn.DomainLookupByName(name)
	return err == nil
}

func xmlUnmarshal(doc string, v any) error { return xml.Unmarshal([]byte(doc), v) }

func uuidString(u golibvirt.UUID) string {
	return fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
}

func TestProvisionFromBaseImage(t *testing.T) {
	p, conn, labels := setup(t)
	ctx := libvirttest.Context(t, time.Minute)
	base := baseVolume(t, conn, 200)
	spec := provision.Spec{
		Name:     libvirttest.Name(t),
		Template: "debian-small",
		Labels:   labels,
		Extra: map[string]any{
			"image": "debian:12", "base_image": base, "cpu": 2, "memoryMB": 256, "diskGB": 1,
			"user": "debian", "ami": "ignored",
		},
	}
	dep, err := p.Provision(ctx, spec)
	if err != nil {
		t.Fatalf("Provision: %v", err)
	}
	t.Cleanup(func() { p.Destroy(context.Background(), dep) })

	if dep.Provider != "libvirt" || dep.Name != spec.Name || dep.Template != spec.Template || dep.State != provision.StateRunning {
		t.Errorf("Provision = %+v, want provider libvirt, name %s, template %s, running", dep, spec.Name, spec.Template)
	}
	if want := []string{"exec:ssh", "copy:sftp", "copy:rsync"}; !slices.Equal(dep.Executors, want) {
		t.Errorf("Executors = %v, want %v", dep.Executors, want)
	}
	if host, port, err := net.SplitHostPort(dep.Address); err != nil || host != "127.0.0.1" || port == "0" {
		t.Errorf("Address = %q, want 127.0.0.1:<forwarded port>", dep.Address)
	}
	if dep.Extra["user"] != "debian" || dep.CreatedAt.IsZero() {
		t.Errorf("Extra user = %v, CreatedAt %v; want the template's user and a time", dep.Extra["user"], dep.CreatedAt)
	}
	for k, v := range labels {
		if dep.Labels[k] != v {
			t.Errorf("Labels[%s] = %q, want %q", k, dep.Labels[k], v)
		}
	}

	dx := domainXML(t, conn, dep.ResourceID)
	if dx.Name != spec.Name || dx.VCPU != 2 || dx.Type != "qemu" {
		t.Errorf("domain name %s, vcpus %d, type %s; want %s, 2, qemu", dx.Name, dx.VCPU, dx.Type, spec.Name)
	}
	if mem, _ := dx.Memory.Bytes(); mem != 256<<20 {
		t.Errorf("domain memory = %d bytes, want 256 MiB", mem)
	}
	inst := dx.Metadata.Instance
	if inst == nil {
		t.Fatalf("domain has no nodemgr metadata")
	}
	got := map[string]string{}
	for _, l := range inst.Labels {
		got[l.Key] = l.Value
	}
	want := maps.Clone(labels)
	want[libvirt.LabelDeployment], want[libvirt.LabelTemplate] = spec.Name, spec.Template
	if !maps.Equal(got, want) {
		t.Errorf("metadata labels = %v, want %v", got, want)
	}
	disk := spec.Name + ".qcow2"
	if len(inst.Volumes) != 1 || inst.Volumes[0].Name != disk || inst.Volumes[0].Pool != libvirttest.TestPool {
		t.Errorf("metadata volumes = %+v, want %s in %s", inst.Volumes, disk, libvirttest.TestPool)
	}
	if len(dx.Devices.Disks) != 1 || dx.Devices.Disks[0].Source == nil || dx.Devices.Disks[0].Source.Volume != disk {
		t.Errorf("domain disks = %+v, want volume %s", dx.Devices.Disks, disk)
	}

	// The root disk is a copy-on-write layer over the base, 1 GiB.
	pool, _ := conn.StoragePoolLookupByName(libvirttest.TestPool)
	vol, err := conn.StorageVolLookupByName(pool, disk)
	if err != nil {
		t.Fatalf("volume %s: %v", disk, err)
	}
	vdoc, _ := conn.StorageVolGetXMLDesc(vol, 0)
	var vx libvirt.VolumeXML
	if err := xmlUnmarshal(vdoc, &vx); err != nil {
		t.Fatal(err)
	}
	if size, _ := vx.Capacity.Bytes(); size != 1<<30 || vx.BackingStore == nil || !strings.HasSuffix(vx.BackingStore.Path, "/"+base) {
		t.Errorf("volume %s = %s, want 1 GiB over %s", disk, vdoc, base)
	}

	found, err := p.Find(ctx, labels)
	if err != nil || len(found) != 1 || found[0].ResourceID != dep.ResourceID || found[0].State != provision.StateRunning ||
		found[0].Address != dep.Address || found[0].Name != spec.Name || found[0].Template != spec.Template || !found[0].CreatedAt.Equal(dep.CreatedAt) {
		t.Errorf("Find(%v) = %+v, %v; want the deployment %+v", labels, found, err, dep)
	}

	if err := p.Destroy(ctx, dep); err != nil {
		t.Fatalf("Destroy: %v", err)
	}
	if domainExists(t, conn, spec.Name) || libvirttest.VolumeExists(t, conn, libvirttest.TestPool, disk) {
		t.Errorf("Destroy left the domain or its volume %s", disk)
	}
	if !libvirttest.VolumeExists(t, conn, libvirttest.TestPool, base) {
		t.Errorf("Destroy removed the base image %s", base)
	}
	if err := p.Destroy(ctx, dep); err != nil {
		t.Errorf("Destroy again = %v, want nil", err)
	}
	if st, err := p.State(ctx, dep); err != nil || st != provision.StateTerminated {
		t.Errorf("State after Destroy = %q, %v; want terminated", st, err)
	}
	if found, err := p.Find(ctx, labels); err != nil || len(found) != 0 {
		t.Errorf("Find after Destroy = %v, %v; want none", found, err)
	}
}

func TestProvisionISOOnANetwork(t *testing.T) {
	p, conn, labels := setup(t)
	ctx := libvirttest.Context(t, time.Minute)
	iso := libvirttest.Name(t) + ".iso"
	libvirttest.CreateVolume(t, conn, libvirttest.TestPool, `<volume><name>`+iso+`</name><capacity unit='MiB'>10</capacity></volume>`)
	// Seed 000's template rendered for libvirt with its mapping.
	spec := provision.Spec{Name: libvirttest.Name(t), Labels: labels, Extra: map[string]any{
		"name": "ubuntu-worker-small", "cpu": 2, "memoryMB": 1024, "diskGB": 3, "image": "ubuntu:24.04", "user": "ubuntu",
		"network": libvirttest.TestNetwork, "iso": iso, "image_type": "iso",
	}}
	dep, err := p.Provision(ctx, spec)
	if err != nil {
		t.Fatalf("Provision: %v", err)
	}
	t.Cleanup(func() { p.Destroy(context.Background(), dep) })
	// The test driver makes up a lease for the NIC.
	if host, port, err := net.SplitHostPort(dep.Address); err != nil || net.ParseIP(host).To4() == nil || port != "22" {
		t.Errorf("Address = %q, want the guest's leased IPv4 address and port 22", dep.Address)
	}
	dx := domainXML(t, conn, dep.ResourceID)
	if len(dx.Devices.Interfaces) != 1 || dx.Devices.Interfaces[0].Type != "network" || dx.Devices.Interfaces[0].Source.Network != libvirttest.TestNetwork {
		t.Errorf("interfaces = %+v, want one on network %s", dx.Devices.Interfaces, libvirttest.TestNetwork)
	}
	var cdrom, disk bool
	for _, d := range dx.Devices.Disks {
		cdrom = cdrom || d.Device == "cdrom" && d.Source != nil && d.Source.Volume == iso
		disk = disk || d.Device == "disk" && d.Source != nil && d.Source.Volume == spec.Name+".qcow2"
	}
	if !cdrom || !disk {
		t.Errorf("disks = %+v, want the ISO as a CD-ROM and a blank root disk", dx.Devices.Disks)
	}
	if boots := dx.OS.Boot; len(boots) == 0 || boots[0].Dev != "cdrom" {
		t.Errorf("boot order = %+v, want the CD-ROM first", boots)
	}
	if dx.Metadata.Instance.Network != libvirttest.TestNetwork || dx.Metadata.Instance.SSH != nil {
		t.Errorf("metadata = %+v, want network %s and no forward", dx.Metadata.Instance, libvirttest.TestNetwork)
	}
}

func TestLifecycle(t *testing.T) {
	p, conn, labels := setup(t)
	ctx := libvirttest.Context(t, 2*time.Minute)
	dep, err := p.Provision(ctx, provision.Spec{Name: libvirttest.Name(t), Labels: labels, Extra: map[string]any{"base_image": baseVolume(t, conn, 64)}})
	if err != nil {
		t.Fatalf("Provision: %v", err)
	}
	t.Cleanup(func() { p.Destroy(context.Background(), dep) })
	if want := provision.Verbs; !slices.Equal(p.Verbs(), want) {
		t.Errorf("Verbs() = %v, want %v", p.Verbs(), want)
	}
	provisiontest.Steps(ctx, t, p, dep, 5*time.Second, [][2]string{
		{provision.VerbStop, provision.StateStopped},
		{provision.VerbStop, provision.StateStopped}, // again: no error
		{provision.VerbStart, provision.StateRunning},
		{provision.VerbStart, provision.StateRunning}, // again: no error
		{provision.VerbHibernate, provision.StateHibernated},
		{provision.VerbHibernate, provision.StateHibernated},
		{provision.VerbStart, provision.StateRunning}, // restores
		{provision.VerbReboot, provision.StateRunning},
		{provision.VerbHibernate, provision.StateHibernated},
		{provision.VerbStop, provision.StateStopped}, // drops the saved memory
		{provision.VerbStart, provision.StateRunning},
		{provision.VerbTerminate, provision.StateTerminated},
		{provision.VerbTerminate, provision.StateTerminated},
	})
}

func TestLifecycleRefusals(t *testing.T) {
	p, conn, labels := setup(t)
	ctx := libvirttest.Context(t, time.Minute)
	dep, err := p.Provision(ctx, provision.Spec{Name: libvirttest.Name(t), Labels: labels, Extra: map[string]any{"base_image": baseVolume(t, conn, 64)}})
	if err != nil {
		t.Fatalf("Provision: %v", err)
	}
	t.Cleanup(func() { p.Destroy(context.Background(), dep) })
	if err := p.Stop(ctx, dep); err != nil {
		t.Fatal(err)
	}
	for _, verb := range []string{provision.VerbReboot, provision.VerbHibernate} {
		if err := provision.Do(ctx, p, verb, dep); !errors.Is(err, errdefs.ErrConflict) {
			t.Errorf("%s of a stopped machine = %v, want a conflict", verb, err)
		}
	}
	if err := p.Start(ctx, dep); err != nil {
		t.Fatal(err)
	}
	if err := p.Hibernate(ctx, dep); err != nil {
		t.Fatal(err)
	}
	if err := provision.Do(ctx, p, provision.VerbReboot, dep); !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("reboot of a hibernated machine = %v, want a conflict", err)
	}
	gone := dep
	gone.ResourceID = "00000000-0000-4000-8000-000000000000"
	for _, verb := range []string{provision.VerbStart, provision.VerbStop, provision.VerbHibernate} {
		if err := provision.Do(ctx, p, verb, gone); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("%s of a machine that is gone = %v, want not found", verb, err)
		}
	}
	bad := dep
	bad.ResourceID = "web-1"
	if _, err := p.State(ctx, bad); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("State with resource ID %q = %v, want invalid", bad.ResourceID, err)
	}
}

// Provision leaves nothing behind when a step fails: here the test driver
// cannot write the NoCloud seed (it has no volume upload).
func TestProvisionFailureLeavesNothing(t *testing.T) {
	p, conn, labels := setup(t)
	ctx := libvirttest.Context(t, time.Minute)
	name := libvirttest.Name(t)
	_, err := p.Provision(ctx, provision.Spec{Name: name, Labels: labels, Extra: map[string]any{
		"base_image": baseVolume(t, conn, 64), "user_data": "#cloud-config\n",
	}})
	if err == nil {
		t.Fatal("Provision with user_data on the test driver succeeded; want the upload refused")
	}
	if !strings.Contains(err.Error(), "write volume "+name+"-cidata.iso") {
		t.Errorf("Provision = %v, want it to say which volume it could not write", err)
	}
	if domainExists(t, conn, name) {
		t.Errorf("Provision left domain %s", name)
	}
	for _, v := range []string{name + ".qcow2", name + "-cidata.iso"} {
		if libvirttest.VolumeExists(t, conn, libvirttest.TestPool, v) {
			t.Errorf("Provision left volume %s", v)
		}
	}
	if found, err := p.Find(ctx, labels); err != nil || len(found) != 0 {
		t.Errorf("Find = %v, %v; want nothing", found, err)
	}
}

func TestProvisionConflicts(t *testing.T) {
	p, conn, labels := setup(t)
	ctx := libvirttest.Context(t, time.Minute)
	base := baseVolume(t, conn, 64)
	spec := provision.Spec{Name: libvirttest.Name(t), Labels: labels, Extra: map[string]any{"base_image": base}}
	dep, err := p.Provision(ctx, spec)
	if err != nil {
		t.Fatalf("Provision: %v", err)
	}
	t.Cleanup(func() { p.Destroy(context.Background(), dep) })
	if _, err := p.Provision(ctx, spec); !errors.Is(err, errdefs.ErrConflict) || !strings.Contains(err.Error(), "exists already") {
		t.Errorf("Provision of the same name again = %v, want a conflict", err)
	}

	// A volume of the name the machine's disk would get is not touched.
	other := libvirttest.Name(t)
	libvirttest.CreateVolume(t, conn, libvirttest.TestPool, `<volume><name>`+other+`.qcow2</name><capacity unit='MiB'>1</capacity></volume>`)
	_, err = p.Provision(ctx, provision.Spec{Name: other, Labels: labels, Extra: map[string]any{"base_image": base}})
	if !errors.Is(err, errdefs.ErrConflict) || !strings.Contains(err.Error(), other+".qcow2 exists already") {
		t.Errorf("Provision over an existing volume = %v, want a conflict naming it", err)
	}
	if !libvirttest.VolumeExists(t, conn, libvirttest.TestPool, other+".qcow2") || domainExists(t, conn, other) {
		t.Errorf("a refused Provision removed the volume in its way, or left a domain")
	}
}

func TestProvisionRefuses(t *testing.T) {
	p, conn, labels := setup(t)
	ctx := libvirttest.Context(t, time.Minute)
	base := baseVolume(t, conn, 64)
	for _, tc := range []struct {
		name  string
		extra map[string]any
		class error
		says  string
	}{
		{"missing base image", map[string]any{"base_image": "no-such.qcow2"}, errdefs.ErrNotFound, `base image "no-such.qcow2" in storage pool default-pool not found`},
		{"missing ISO", map[string]any{"iso": "no-such.iso"}, errdefs.ErrNotFound, `iso "no-such.iso"`},
		{"missing pool", map[string]any{"base_image": base, "pool": "no-such-pool"}, errdefs.ErrNotFound, `storage pool "no-such-pool"`},
		{"missing network", map[string]any{"base_image": base, "network": "no-such-net"}, errdefs.ErrNotFound, `libvirt network "no-such-net"`},
		{"no boot source", map[string]any{"image": "ubuntu"}, errdefs.ErrInvalid, "needs a boot source"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := libvirttest.Name(t)
			_, err := p.Provision(ctx, provision.Spec{Name: name, Labels: labels, Extra: tc.extra})
			if !errors.Is(err, tc.class) || !strings.Contains(errdefs.Message(err), tc.says) {
				t.Errorf("Provision(%v) = %v, want %v saying %q", tc.extra, err, tc.class, tc.says)
			}
			if domainExists(t, conn, name) {
				t.Errorf("a refused Provision left domain %s", name)
			}
		})
	}
	if _, err := p.Provision(ctx, provision.Spec{Name: "bad/name", Extra: map[string]any{"base_image": base}}); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("Provision named bad/name = %v, want invalid", err)
	}
}

// Find lists only the provider's own domains: the test driver's "test"
// domain has no nodemgr metadata.
func TestFindListsOnlyItsOwn(t *testing.T) {
	p, conn, labels := setup(t)
	ctx := libvirttest.Context(t, time.Minute)
	base := baseVolume(t, conn, 64)
	var deps []provision.Deployment
	for i := range 2 {
		l := maps.Clone(labels)
		l["nodemgr.pool"] = fmt.Sprint("p", i)
		dep, err := p.Provision(ctx, provision.Spec{Name: libvirttest.Name(t), Labels: l, Extra: map[string]any{"base_image": base}})
		if err != nil {
			t.Fatalf("Provision: %v", err)
		}
		t.Cleanup(func() { p.Destroy(context.Background(), dep) })
		deps = append(deps, dep)
	}
	all, err := p.Find(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range all {
		if d.Name == "test" || d.Labels[libvirt.LabelDeployment] == "" {
			t.Errorf("Find(nil) listed %+v, which nodemgr did not make", d)
		}
	}
	one, err := p.Find(ctx, map[string]string{libvirttest.LabelTest: labels[libvirttest.LabelTest], "nodemgr.pool": "p1"})
	if err != nil || len(one) != 1 || one[0].ResourceID != deps[1].ResourceID {
		t.Errorf("Find by test and pool p1 = %+v, %v; want %s", one, err, deps[1].Name)
	}
	if err := p.Stop(ctx, deps[0]); err != nil {
		t.Fatal(err)
	}
	both, err := p.Find(ctx, labels)
	if err != nil || len(both) != 2 {
		t.Fatalf("Find(%v) = %+v, %v; want both", labels, both, err)
	}
	states := map[string]string{}
	for _, d := range both {
		states[d.ResourceID] = d.State
	}
	if states[deps[0].ResourceID] != provision.StateStopped || states[deps[1].ResourceID] != provision.StateRunning {
		t.Errorf("Find states = %v, want stopped and running", states)
	}
}

func TestUnreachableDaemon(t *testing.T) {
	p, err := libvirt.New(map[string]string{"uri": "test+unix:///default?socket=/nonexistent/libvirt-sock"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx := libvirttest.Context(t, time.Minute)
	if _, err := p.Find(ctx, nil); !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "/nonexistent/libvirt-sock") {
		t.Errorf("Find with no daemon = %v, want unavailable, naming the socket", err)
	}
	dep := provision.Deployment{Name: "x", ResourceID: "00000000-0000-4000-8000-000000000000"}
	if _, err := p.State(ctx, dep); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("State with no daemon = %v, want unavailable (not terminated)", err)
	}
}

func TestRemoteUserModeNetworkingRefused(t *testing.T) {
	p, err := libvirt.New(map[string]string{"uri": "qemu+ssh://vmhost/system"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.Provision(context.Background(), provision.Spec{Name: "x", Extra: map[string]any{"base_image": "b"}})
	var fe *errdefs.FieldError
	if !errors.As(err, &fe) || fe.Field != "extra.network" {
		t.Errorf("Provision with user-mode networking on a remote host = %v, want a field error on extra.network", err)
	}
}

func TestSettings(t *testing.T) {
	for _, tc := range []struct {
		settings map[string]string
		field    string // "" when valid
	}{
		{nil, ""},
		{map[string]string{"uri": "qemu+ssh://root@vmhost/system", "pool": "images", "domain_type": "kvm", "stop_timeout": "10s", "ready_timeout": "0"}, ""},
		{map[string]string{"pool": "vms", "pool_dir": "/srv/vms"}, ""},
		{map[string]string{"pool_dir": "images"}, "settings.pool_dir"},
		{map[string]string{"uri": "not a uri"}, "settings.uri"},
		{map[string]string{"domain_type": "xen"}, "settings.domain_type"},
		{map[string]string{"stop_timeout": "soon"}, "settings.stop_timeout"},
		{map[string]string{"ready_timeout": "-1s"}, "settings.ready_timeout"},
		{map[string]string{"host": "x"}, "settings.host"},
	} {
		p, err := libvirt.New(tc.settings)
		if tc.field == "" {
			if err != nil {
				t.Errorf("New(%v) = %v, want a provider", tc.settings, err)
			} else if p.URI() == "" {
				t.Errorf("New(%v).URI() is empty", tc.settings)
			}
			continue
		}
		var fe *errdefs.FieldError
		if !errors.As(err, &fe) || fe.Field != tc.field {
			t.Errorf("New(%v) = %v, want a field error on %s", tc.settings, err, tc.field)
		}
	}
	if p, _ := libvirt.New(nil); p.URI() != libvirt.DefaultURI {
		t.Errorf("default URI = %s, want %s", p.URI(), libvirt.DefaultURI)
	}
}

func TestRegistered(t *testing.T) {
	p, err := provision.New("libvirt", map[string]string{"uri": "test:///default"})
	if err != nil || p.Name() != "libvirt" {
		t.Fatalf(`provision.New("libvirt") = %v, %v`, p, err)
	}
	if _, ok := p.(provision.Lifecycle); !ok {
		t.Errorf("the libvirt provider has no lifecycle control")
	}
	if _, ok := p.(interface {
		Find(context.Context, map[string]string) ([]provision.Deployment, error)
	}); !ok {
		t.Errorf("the libvirt provider cannot Find")
	}
}

// overrides.libvirt may name only the keys the provider reads: seed 000's
// block passes, a typo is refused with a suggestion.
func TestDeclaredKeys(t *testing.T) {
	seed := map[string]map[string]any{"libvirt": {"memoryMB": 1024, "diskGB": 3, "network": "default", "iso": "u.iso", "image_type": "iso"}}
	if err := mapping.ValidateOverrides("overrides", seed); err != nil {
		t.Errorf("seed 000's libvirt overrides: %v", err)
	}
	err := mapping.ValidateOverrides("overrides", map[string]map[string]any{"libvirt": {"netwrok": "default"}})
	if !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), "did you mean network?") {
		t.Errorf("overrides.libvirt.netwrok = %v, want refused with a suggestion", err)
	}
}

// TestLocal: a URI without a host, or with a loopback one, is a daemon on
// this host, whatever its transport; any other host is remote.
func TestLocal(t *testing.T) {
	for _, tc := range []struct {
		uri  string
		want bool
	}{
		{"qemu:///system", true},
		{"qemu:///session", true},
		{"qemu+unix:///system", true},
		{"qemu+unix:///system?socket=/run/libvirt/libvirt-sock", true},
		{"qemu+ssh://localhost/system", true},
		{"qemu+tcp://127.0.0.1/system", true},
		{"qemu+ssh://[::1]/system", true},
		{"qemu+ssh://root@kvm1.example.com/system", false},
		{"qemu+tcp://10.0.0.5:16509/system", false},
	} {
		p, err := libvirt.New(map[string]string{"uri": tc.uri})
		if err != nil {
			t.Fatalf("New(%q): %v", tc.uri, err)
		}
		if got := p.Local(); got != tc.want {
			t.Errorf("New(%q).Local() = %v, want %v", tc.uri, got, tc.want)
		}
	}
}
