package libvirt

import (
	"crypto/rand"
	"fmt"
	"path"
	"slices"
	"strings"

	golibvirt "github.com/digitalocean/go-libvirt"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
)

// newVolume is a volume Provision makes for a machine.
type newVolume struct {
	xml    VolumeXML
	upload []byte // content to write into it (the NoCloud seed); nil for none
}

// layout is a machine's storage: the volumes to make and the disks the
// domain gets.
type layout struct {
	pool    string
	volumes []newVolume
	disks   []Disk
}

// planStorage resolves the boot source and works out the volumes to make,
// refusing names already taken in the pool.
func (p *Libvirt) planStorage(c client, name string, cfg config, seed []byte) (layout, error) {
	lo := layout{pool: cfg.pool}
	if lo.pool == "" {
		lo.pool = p.pool
	}
	pool, err := p.storagePool(c, lo.pool)
	if err != nil {
		return lo, err
	}
	refreshed := false
	lookup := func(vol string) (golibvirt.StorageVol, error) {
		v, err := c.StorageVolLookupByName(pool, vol)
		if isCode(err, golibvirt.ErrNoStorageVol) && !refreshed {
			// A file copied into the pool's directory by hand is a
			// volume only once the pool is refreshed.
			refreshed = true
			if c.StoragePoolRefresh(pool, 0) == nil {
				v, err = c.StorageVolLookupByName(pool, vol)
			}
		}
		return v, err
	}

	var vd []string // virtio disk names in order: vda, vdb, …
	nextVD := func() string {
		d := "vd" + string(rune('a'+len(vd)))
		vd = append(vd, d)
		return d
	}
	addVolume := func(v VolumeXML, upload []byte, disk Disk) {
		v.Name = volumeName(name, v.Name)
		lo.volumes = append(lo.volumes, newVolume{xml: v, upload: upload})
		disk.Type = "volume"
		disk.Source = &DiskSource{Pool: lo.pool, Volume: v.Name}
		lo.disks = append(lo.disks, disk)
	}

	// The root disk: a copy-on-write layer over the base image, or a
	// blank disk of the size asked for (an installer's target).
	if cfg.baseImage != "" {
		base, err := p.resolveBase(c, lookup, lo.pool, cfg.baseImage)
		if err != nil {
			return lo, err
		}
		capacity := max(cfg.diskBytes, base.capacity)
		if capacity == 0 {
			return lo, errdefs.Field("extra.diskGB", "the size of base image %s is unknown (it is in no storage pool): give diskGB", cfg.baseImage)
		}
		addVolume(VolumeXML{
			Name:         "disk",
			Capacity:     &Size{Unit: "bytes", Value: capacity},
			Target:       &VolumeTarget{Format: &VolumeFormat{Type: "qcow2"}},
			BackingStore: &VolumeTarget{Path: base.path, Format: &VolumeFormat{Type: base.format}},
		}, nil, Disk{Device: "disk", Driver: &DiskDriver{Name: "qemu", Type: "qcow2"}, Target: DiskTarget{Dev: nextVD(), Bus: "virtio"}})
	} else if cfg.diskBytes > 0 {
		addVolume(VolumeXML{
			Name:     "disk",
			Capacity: &Size{Unit: "bytes", Value: cfg.diskBytes},
			Target:   &VolumeTarget{Format: &VolumeFormat{Type: "qcow2"}},
		}, nil, Disk{Device: "disk", Driver: &DiskDriver{Name: "qemu", Type: "qcow2"}, Target: DiskTarget{Dev: nextVD(), Bus: "virtio"}})
	}

	if cfg.boot == bootISO {
		cd := Disk{Device: "cdrom", Driver: &DiskDriver{Name: "qemu", Type: "raw"}, Target: DiskTarget{Dev: "sda", Bus: "scsi"}, ReadOnly: &Empty{}}
		if path.IsAbs(cfg.iso) {
			cd.Type, cd.Source = "file", &DiskSource{File: cfg.iso}
		} else {
			if _, err := lookup(cfg.iso); err != nil {
				if isCode(err, golibvirt.ErrNoStorageVol) {
					return lo, errdefs.NotFound("iso %q in storage pool %s (upload it with virsh vol-upload, or give an absolute path on the libvirt host)", cfg.iso, lo.pool)
				}
				return lo, fmt.Errorf("iso %s: %w", cfg.iso, classify(err))
			}
			cd.Type, cd.Source = "volume", &DiskSource{Pool: lo.pool, Volume: cfg.iso}
		}
		lo.disks = append(lo.disks, cd)
	}

	if seed != nil {
		addVolume(VolumeXML{
			Name:     "cidata.iso",
			Capacity: &Size{Unit: "bytes", Value: uint64(len(seed))},
			Target:   &VolumeTarget{Format: &VolumeFormat{Type: "raw"}},
		}, seed, Disk{Device: "disk", Driver: &DiskDriver{Name: "qemu", Type: "raw"}, Target: DiskTarget{Dev: nextVD(), Bus: "virtio"}, ReadOnly: &Empty{}})
	}

	for _, v := range lo.volumes {
		if _, err := c.StorageVolLookupByName(pool, v.xml.Name); err == nil {
			return lo, errdefs.Conflict("volume %s exists already in storage pool %s: another machine of that name, or one left behind (virsh vol-delete --pool %s %s)", v.xml.Name, lo.pool, lo.pool, v.xml.Name)
		} else if !isCode(err, golibvirt.ErrNoStorageVol) {
			return lo, fmt.Errorf("volume %s: %w", v.xml.Name, classify(err))
		}
	}
	return lo, nil
}

// volumeName is the name of a machine's volume: the machine's name and
// the volume's role, so that the pool shows whose it is.
func volumeName(machine, role string) string {
	if role == "disk" {
		return machine + ".qcow2"
	}
	return machine + "-" + role
}

// baseImage is a resolved base image.
type baseImage struct {
	path     string
	format   string
	capacity uint64 // bytes; 0 when unknown
}

// resolveBase finds a base image: a volume of the pool by name, or a path
// on the host, which libvirt may know as a volume of some pool.
func (p *Libvirt) resolveBase(c client, lookup func(string) (golibvirt.StorageVol, error), pool, ref string) (baseImage, error) {
	var vol golibvirt.StorageVol
	var err error
	if path.IsAbs(ref) {
		vol, err = c.StorageVolLookupByPath(ref)
		if err != nil {
			// Not in any pool: use the file as it is.
			format := "qcow2"
			if strings.HasSuffix(ref, ".raw") || strings.HasSuffix(ref, ".img") {
				format = "raw"
			}
			return baseImage{path: ref, format: format}, nil
		}
	} else if vol, err = lookup(ref); err != nil {
		if isCode(err, golibvirt.ErrNoStorageVol) {
			return baseImage{}, errdefs.NotFound("base image %q in storage pool %s (upload it with virsh vol-upload, or give an absolute path on the libvirt host)", ref, pool)
		}
		return baseImage{}, fmt.Errorf("base image %s: %w", ref, classify(err))
	}
	doc, err := c.StorageVolGetXMLDesc(vol, 0)
	if err != nil {
		return baseImage{}, fmt.Errorf("base image %s: %w", ref, classify(err))
	}
	var v VolumeXML
	if err := unmarshalXML(doc, &v); err != nil {
		return baseImage{}, fmt.Errorf("base image %s: read its volume XML: %w", ref, err)
	}
	b := baseImage{format: "raw"}
	if v.Target != nil {
		b.path = v.Target.Path
		if v.Target.Format != nil && v.Target.Format.Type != "" {
			b.format = v.Target.Format.Type
		}
	}
	if b.path == "" {
		if b.path, err = c.StorageVolGetPath(vol); err != nil {
			return baseImage{}, fmt.Errorf("base image %s: %w", ref, classify(err))
		}
	}
	if v.Capacity != nil {
		b.capacity, _ = v.Capacity.Bytes()
	}
	return b, nil
}

// domainSpec is everything a domain's XML is made from.
type domainSpec struct {
	name, uuid, domainType string
	cfg                    config
	disks                  []Disk
	instance               *Instance
	mac                    string
}

// domainXML builds a machine's domain.
func domainXML(s domainSpec) DomainXML {
	c := s.cfg
	d := DomainXML{
		Type:       s.domainType,
		Name:       s.name,
		UUID:       s.uuid,
		Metadata:   &Metadata{Instance: s.instance},
		Memory:     &Size{Unit: "MiB", Value: c.memoryMiB},
		VCPU:       c.vcpus,
		OS:         OSXML{Type: OSType{Arch: c.arch, Machine: c.machine, Value: "hvm"}},
		OnPoweroff: "destroy",
		OnReboot:   "restart",
		OnCrash:    "destroy",
	}
	switch c.arch {
	case "x86_64":
		d.Features = &Features{ACPI: &Empty{}, APIC: &Empty{}}
		if s.domainType == "kvm" {
			d.CPU = &CPUXML{Mode: "host-passthrough"}
		}
	case "aarch64":
		if d.OS.Type.Machine == "" {
			d.OS.Type.Machine = "virt"
		}
		// Booting from a disk or an ISO needs UEFI there; ACPI comes with it.
		if c.boot != bootKernel {
			d.OS.Firmware = "efi"
			d.Features = &Features{ACPI: &Empty{}}
		}
		d.CPU = &CPUXML{Mode: "maximum"}
		if s.domainType == "kvm" {
			d.CPU = &CPUXML{Mode: "host-passthrough"}
		}
	}
	switch c.boot {
	case bootKernel:
		d.OS.Kernel, d.OS.Initrd, d.OS.Cmdline = c.kernel, c.initrd, c.cmdline
	case bootISO:
		d.OS.Boot = []BootDevice{{Dev: "cdrom"}, {Dev: "hd"}}
	default:
		d.OS.Boot = []BootDevice{{Dev: "hd"}}
	}

	d.Devices.Disks = s.disks
	if slices.ContainsFunc(s.disks, func(d Disk) bool { return d.Target.Bus == "scsi" }) {
		d.Devices.Controllers = append(d.Devices.Controllers, Controller{Type: "scsi", Index: "0", Model: "virtio-scsi"})
	}
	if c.netMode == netNetwork {
		d.Devices.Interfaces = []Interface{{
			Type:   "network",
			MAC:    &MAC{Address: s.mac},
			Source: &InterfaceSource{Network: c.network},
			Model:  &Model{Type: "virtio"},
		}}
	}
	serial := Serial{Type: "pty"}
	if c.consoleLog != "" {
		serial.Log = &CharLog{File: c.consoleLog, Append: "off"}
	}
	d.Devices.Serials = []Serial{serial}
	d.Devices.Consoles = []Console{{Type: "pty", Target: &SerialTarget{Type: "serial", Port: "0"}}}
	d.Devices.Channels = []Channel{{Type: "unix", Target: ChannelTarget{Type: "virtio", Name: "org.qemu.guest_agent.0"}}}
	d.Devices.RNGs = []RNG{{Model: "virtio", Backend: RNGBackend{Model: "random", Device: "/dev/urandom"}}}
	return d
}

// forwardSSH adds user-mode networking to a defined domain: a virtio NIC
// on QEMU's slirp with the guest's port 22 forwarded from addr:port on the
// host. libvirt does not see the NIC (it is passed to QEMU as it is), so
// it goes on a PCI slot that the defined domain (as libvirt laid it out)
// leaves free.
func forwardSSH(d *DomainXML, defined DomainXML, addr string, port int) error {
	bus := "pci.0"
	for _, c := range defined.Devices.Controllers {
		if c.Type == "pci" && c.Index == "0" && c.Model == "pcie-root" {
			bus = "pcie.0"
		}
	}
	used := map[int]bool{}
	mark := func(a *Address) {
		if b, s, ok := a.PCISlot(); ok && b == 0 {
			used[s] = true
		}
	}
	for _, x := range defined.Devices.Disks {
		mark(x.Address)
	}
	for _, x := range defined.Devices.Controllers {
		mark(x.Address)
	}
	for _, x := range defined.Devices.Interfaces {
		mark(x.Address)
	}
	for _, x := range defined.Devices.RNGs {
		mark(x.Address)
	}
	for _, x := range defined.Devices.Others {
		mark(x.Address)
	}
	slot := 0
	for s := 0x1e; s >= 0x03; s-- {
		if !used[s] {
			slot = s
			break
		}
	}
	if slot == 0 {
		return fmt.Errorf("no free PCI slot for the user-mode network card")
	}
	d.Commandline = &QEMUCommandline{Args: []QEMUArg{
		{Value: "-netdev"},
		{Value: fmt.Sprintf("user,id=nodemgr0,hostfwd=tcp:%s:%d-:22", addr, port)},
		{Value: "-device"},
		{Value: fmt.Sprintf("virtio-net-pci,netdev=nodemgr0,bus=%s,addr=%#x", bus, slot)},
	}}
	return nil
}

// newUUID is a random (version 4) UUID in libvirt's text form.
func newUUID() string {
	var b [16]byte
	rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// parseUUID reads a UUID in its text form.
func parseUUID(s string) (golibvirt.UUID, error) {
	var u golibvirt.UUID
	h := strings.ReplaceAll(s, "-", "")
	if len(h) != 32 || len(s) != 36 {
		return u, fmt.Errorf("%q is not a UUID", s)
	}
	for i := range u {
		var b byte
		if _, err := fmt.Sscanf(h[2*i:2*i+2], "%02x", &b); err != nil {
			return u, fmt.Errorf("%q is not a UUID", s)
		}
		u[i] = b
	}
	return u, nil
}

// formatUUID is a UUID's text form.
func formatUUID(u golibvirt.UUID) string {
	return fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
}

// newMAC is a random address in QEMU's range 52:54:00.
func newMAC() string {
	var b [3]byte
	rand.Read(b[:])
	return fmt.Sprintf("52:54:00:%02x:%02x:%02x", b[0], b[1], b[2])
}
