package libvirt

import (
	"encoding/xml"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// ignoreXMLName ignores the element names that reading fills in.
var ignoreXMLName = cmp.FilterPath(func(p cmp.Path) bool { return p.Last().String() == ".XMLName" }, cmp.Ignore())

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to write it)", err)
	}
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		t.Errorf("%s differs (-want +got; -update rewrites it):\n%s", path, diff)
	}
}

// readLibvirt reads a document that libvirt itself wrote (virsh dumpxml of
// the golden domains, a volume, a network, a pool on libvirt 9.0).
func readLibvirt(t *testing.T, name string, v any) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	if err := xml.Unmarshal(b, v); err != nil {
		t.Fatalf("read %s: %v", name, err)
	}
}

// domains are the domains of the golden files, as Provision builds them.
func domains() map[string]domainSpec {
	inst := &Instance{Created: "2026-01-02T03:04:05Z",
		Labels:  []Label{{Key: "nodemgr.deployment", Value: "web-1"}, {Key: "nodemgr.owner", Value: "o1"}},
		Volumes: []VolumeRef{{Pool: "default", Name: "web-1-cidata.iso"}},
		SSH:     &SSHForward{Address: "127.0.0.1", Port: 40022},
	}
	seedDisk := Disk{Type: "volume", Device: "disk", Driver: &DiskDriver{Name: "qemu", Type: "raw"}, Source: &DiskSource{Pool: "default", Volume: "web-1-cidata.iso"},
		Target: DiskTarget{Dev: "vda", Bus: "virtio"}, ReadOnly: &Empty{}}
	rootDisk := Disk{Type: "volume", Device: "disk", Driver: &DiskDriver{Name: "qemu", Type: "qcow2"}, Source: &DiskSource{Pool: "default", Volume: "web-1.qcow2"},
		Target: DiskTarget{Dev: "vda", Bus: "virtio"}}
	cdrom := Disk{Type: "volume", Device: "cdrom", Driver: &DiskDriver{Name: "qemu", Type: "raw"}, Source: &DiskSource{Pool: "default", Volume: "ubuntu-24.04.3-live-server-amd64.iso"},
		Target: DiskTarget{Dev: "sda", Bus: "scsi"}, ReadOnly: &Empty{}}
	netInst := &Instance{Created: inst.Created, Labels: inst.Labels, Volumes: []VolumeRef{{Pool: "default", Name: "web-1.qcow2"}}, Network: "default"}
	return map[string]domainSpec{
		"domain-kernel-user.xml": {name: "web-1", uuid: "6f1c1d0e-3b59-4d0c-9a57-0d6c5d8c2e11", domainType: "qemu", instance: inst,
			cfg: config{arch: "x86_64", vcpus: 1, memoryMiB: 256, boot: bootKernel, kernel: "/var/lib/nodemgr/vmlinuz",
				initrd: "/var/lib/nodemgr/initrd", cmdline: "console=ttyS0", netMode: netUser, consoleLog: "/var/log/nodemgr/web-1.log"},
			disks: []Disk{seedDisk}},
		"domain-iso-network.xml": {name: "web-1", uuid: "6f1c1d0e-3b59-4d0c-9a57-0d6c5d8c2e12", domainType: "qemu", instance: netInst, mac: "52:54:00:12:34:56",
			cfg:   config{arch: "x86_64", vcpus: 2, memoryMiB: 1024, boot: bootISO, netMode: netNetwork, network: "default"},
			disks: []Disk{rootDisk, cdrom}},
		"domain-disk-aarch64-kvm.xml": {name: "web-1", uuid: "6f1c1d0e-3b59-4d0c-9a57-0d6c5d8c2e13", domainType: "kvm", instance: netInst, mac: "52:54:00:12:34:57",
			cfg:   config{arch: "aarch64", vcpus: 4, memoryMiB: 2048, boot: bootDisk, netMode: netNetwork, network: "default"},
			disks: []Disk{rootDisk}},
	}
}

func TestDomainXML(t *testing.T) {
	for file, s := range domains() {
		t.Run(file, func(t *testing.T) {
			d := domainXML(s)
			if s.instance.SSH != nil {
				// As Provision does: the forward goes on a slot libvirt
				// left free in the domain it defined.
				var defined DomainXML
				readLibvirt(t, "libvirt-"+file, &defined)
				if err := forwardSSH(&d, defined, s.instance.SSH.Address, s.instance.SSH.Port); err != nil {
					t.Fatal(err)
				}
			}
			doc, err := marshalXML(d)
			if err != nil {
				t.Fatal(err)
			}
			golden(t, file, []byte(doc+"\n"))

			var back DomainXML
			if err := unmarshalXML(doc, &back); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(d, back, ignoreXMLName); diff != "" {
				t.Errorf("marshal, unmarshal (-built +read):\n%s", diff)
			}
		})
	}
}

// What libvirt wrote back when it defined the golden domains keeps what
// the provider reads: its metadata, disks, NIC, firmware, the QEMU
// arguments; and reading, writing and reading it again changes nothing.
func TestReadLibvirtDomains(t *testing.T) {
	for file, s := range domains() {
		if strings.Contains(file, "aarch64") {
			continue // not defined: the host has no aarch64 QEMU
		}
		t.Run(file, func(t *testing.T) {
			var d DomainXML
			readLibvirt(t, "libvirt-"+file, &d)
			if d.UUID != s.uuid || d.Name != s.name || d.Type != s.domainType {
				t.Errorf("uuid, name, type = %s, %s, %s; want %s, %s, %s", d.UUID, d.Name, d.Type, s.uuid, s.name, s.domainType)
			}
			if d.Metadata == nil || d.Metadata.Instance == nil {
				t.Fatalf("no nodemgr metadata read")
			}
			if diff := cmp.Diff(s.instance, d.Metadata.Instance, ignoreXMLName); diff != "" {
				t.Errorf("metadata (-written +read):\n%s", diff)
			}
			if mem, err := d.Memory.Bytes(); err != nil || mem != s.cfg.memoryMiB<<20 {
				t.Errorf("memory = %v (%v), want %d MiB", mem, err, s.cfg.memoryMiB)
			}
			if len(d.Devices.Disks) != len(s.disks) {
				t.Errorf("disks = %+v, want %d", d.Devices.Disks, len(s.disks))
			}
			for i := range min(len(d.Devices.Disks), len(s.disks)) {
				if got, want := d.Devices.Disks[i].Source, s.disks[i].Source; got == nil || *got != *want {
					t.Errorf("disk %d source = %+v, want %+v", i, got, want)
				}
			}
			if s.cfg.netMode == netNetwork && (len(d.Devices.Interfaces) != 1 || d.Devices.Interfaces[0].MAC.Address != s.mac || d.Devices.Interfaces[0].Address == nil) {
				t.Errorf("interfaces = %+v, want one with MAC %s and a PCI address", d.Devices.Interfaces, s.mac)
			}
			if len(d.Devices.Others) == 0 {
				t.Errorf("read none of the devices libvirt added")
			}

			doc, err := marshalXML(d)
			if err != nil {
				t.Fatal(err)
			}
			var again DomainXML
			if err := unmarshalXML(doc, &again); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(d, again); diff != "" {
				t.Errorf("read, write, read (-first +second):\n%s", diff)
			}
		})
	}
}

func TestReadLibvirtStorageAndNetwork(t *testing.T) {
	var v VolumeXML
	readLibvirt(t, "libvirt-volume.xml", &v)
	if size, _ := v.Capacity.Bytes(); v.Name != "web-1.qcow2" || size != 1<<30 || v.Target.Format.Type != "qcow2" ||
		v.BackingStore == nil || !strings.HasSuffix(v.BackingStore.Path, "/base.qcow2") || v.BackingStore.Format.Type != "qcow2" {
		t.Errorf("volume = %+v, want web-1.qcow2, 1 GiB qcow2 over base.qcow2", v)
	}
	var n NetworkXML
	readLibvirt(t, "libvirt-network.xml", &n)
	if n.Name != "default" || n.Forward.Mode != "nat" || len(n.IPs) != 1 || n.IPs[0].DHCP == nil || len(n.IPs[0].DHCP.Ranges) != 1 {
		t.Errorf("network = %+v, want default, NAT, one range with DHCP", n)
	}
	var p PoolXML
	readLibvirt(t, "libvirt-pool.xml", &p)
	if p.Type != "dir" || p.Target == nil || p.Target.Path == "" || p.Capacity == nil {
		t.Errorf("pool = %+v, want a dir pool with a path and a capacity", p)
	}
	for _, doc := range []any{&v, &n, &p} {
		b, err := xml.Marshal(doc)
		if err != nil {
			t.Fatal(err)
		}
		again := newLike(doc)
		if err := xml.Unmarshal(b, again); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(doc, again); diff != "" {
			t.Errorf("read, write, read %T (-first +second):\n%s", doc, diff)
		}
	}
}

func newLike(v any) any {
	switch v.(type) {
	case *VolumeXML:
		return &VolumeXML{}
	case *NetworkXML:
		return &NetworkXML{}
	}
	return &PoolXML{}
}

func TestForwardSSHSlot(t *testing.T) {
	dev := func(slot string) OtherDevice {
		return OtherDevice{XMLName: xml.Name{Local: "memballoon"}, Address: &Address{Type: "pci", Domain: "0x0000", Bus: "0x00", Slot: slot, Function: "0x0"}}
	}
	for _, tc := range []struct {
		name    string
		defined DomainXML
		want    string
	}{
		{"pc", DomainXML{Devices: Devices{Controllers: []Controller{{Type: "pci", Index: "0", Model: "pci-root"}}, Others: []OtherDevice{dev("0x02")}}},
			"virtio-net-pci,netdev=nodemgr0,bus=pci.0,addr=0x1e"},
		{"q35", DomainXML{Devices: Devices{Controllers: []Controller{{Type: "pci", Index: "0", Model: "pcie-root"}}}},
			"virtio-net-pci,netdev=nodemgr0,bus=pcie.0,addr=0x1e"},
		{"0x1e taken", DomainXML{Devices: Devices{Others: []OtherDevice{dev("0x1e")}}},
			"virtio-net-pci,netdev=nodemgr0,bus=pci.0,addr=0x1d"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var d DomainXML
			if err := forwardSSH(&d, tc.defined, "127.0.0.1", 2222); err != nil {
				t.Fatal(err)
			}
			args := d.Commandline.Args
			if len(args) != 4 || args[1].Value != "user,id=nodemgr0,hostfwd=tcp:127.0.0.1:2222-:22" || args[3].Value != tc.want {
				t.Errorf("forwardSSH args = %+v, want the netdev forwarding 2222 and %s", args, tc.want)
			}
		})
	}
	var full DomainXML
	for s := 3; s <= 0x1e; s++ {
		full.Devices.Others = append(full.Devices.Others, OtherDevice{Address: &Address{Type: "pci", Bus: "0x00", Slot: fmt.Sprintf("%#x", s)}})
	}
	if err := forwardSSH(&DomainXML{}, full, "127.0.0.1", 2222); err == nil {
		t.Errorf("forwardSSH with every slot taken = nil, want an error")
	}
}

func TestUUID(t *testing.T) {
	u := newUUID()
	p, err := parseUUID(u)
	if err != nil || formatUUID(p) != u || u[14] != '4' {
		t.Errorf("newUUID() = %s, parse and format give %s, %v; want it back, version 4", u, formatUUID(p), err)
	}
	for _, bad := range []string{"", "web-1", strings.Repeat("x", 36), "6f1c1d0e3b594d0c9a570d6c5d8c2e11"} {
		if _, err := parseUUID(bad); err == nil {
			t.Errorf("parseUUID(%q) = nil error, want one", bad)
		}
	}
}

func TestSizeBytes(t *testing.T) {
	for _, tc := range []struct {
		s    Size
		want uint64
	}{{Size{"KiB", 65536}, 64 << 20}, {Size{"bytes", 5}, 5}, {Size{"", 7}, 7}, {Size{"G", 2}, 2 << 30}, {Size{"MB", 3}, 3e6}} {
		if got, err := tc.s.Bytes(); err != nil || got != tc.want {
			t.Errorf("%+v.Bytes() = %d, %v, want %d", tc.s, got, err, tc.want)
		}
	}
	if _, err := (Size{"parsecs", 1}).Bytes(); err == nil {
		t.Errorf("Size in parsecs has bytes")
	}
	if _, err := (Size{"TiB", 1 << 30}).Bytes(); err == nil {
		t.Errorf("2^70 bytes did not overflow")
	}
}
