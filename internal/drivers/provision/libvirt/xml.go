package libvirt

import (
	"encoding/xml"
	"fmt"
	"strconv"
	"strings"
)

// The few parts of libvirt's domain, volume, network and storage pool XML
// that the provider writes or reads (libvirt.org/formatdomain.html and
// friends). Elements not modelled here are dropped when a document is
// read, so a parsed document is for reading: the provider never
// redefines a domain from one it read back.

// Namespace is the XML namespace of the provider's element in a domain's
// <metadata>, which holds what libvirt has no field for: labels, the
// volumes made for the domain, the forwarded SSH port.
const Namespace = "https://nodemgr.dev/xmlns/libvirt/1"

// DomainXML is a <domain>.
type DomainXML struct {
	XMLName       xml.Name         `xml:"domain"`
	Type          string           `xml:"type,attr"` // qemu (TCG), kvm, test
	Name          string           `xml:"name"`
	UUID          string           `xml:"uuid,omitempty"`
	Metadata      *Metadata        `xml:"metadata,omitempty"`
	Memory        *Size            `xml:"memory,omitempty"`
	CurrentMemory *Size            `xml:"currentMemory,omitempty"`
	VCPU          int              `xml:"vcpu,omitempty"`
	OS            OSXML            `xml:"os"`
	Features      *Features        `xml:"features,omitempty"`
	CPU           *CPUXML          `xml:"cpu,omitempty"`
	OnPoweroff    string           `xml:"on_poweroff,omitempty"`
	OnReboot      string           `xml:"on_reboot,omitempty"`
	OnCrash       string           `xml:"on_crash,omitempty"`
	Devices       Devices          `xml:"devices"`
	Commandline   *QEMUCommandline `xml:"http://libvirt.org/schemas/domain/qemu/1.0 commandline,omitempty"`
}

// Metadata is a domain's <metadata>; only the provider's own element is kept.
type Metadata struct {
	Instance *Instance `xml:"https://nodemgr.dev/xmlns/libvirt/1 instance,omitempty"`
}

// Instance is the provider's element in a domain's metadata.
type Instance struct {
	XMLName xml.Name    `xml:"https://nodemgr.dev/xmlns/libvirt/1 instance"`
	Created string      `xml:"created,omitempty"` // RFC 3339
	Labels  []Label     `xml:"label"`
	Volumes []VolumeRef `xml:"volume"`
	SSH     *SSHForward `xml:"ssh,omitempty"`
	Network string      `xml:"network,omitempty"` // the libvirt network of the first NIC, if any
}

// Label is one key=value label.
type Label struct {
	Key   string `xml:"key,attr"`
	Value string `xml:"value,attr"`
}

// VolumeRef names a volume the provider made for the domain; it goes when
// the domain does.
type VolumeRef struct {
	Pool string `xml:"pool,attr"`
	Name string `xml:"name,attr"`
}

// SSHForward is the host end of user-mode networking's forward to the
// guest's port 22.
type SSHForward struct {
	Address string `xml:"address,attr"`
	Port    int    `xml:"port,attr"`
}

// Size is an amount with a unit (memory, capacity).
type Size struct {
	Unit  string `xml:"unit,attr,omitempty"`
	Value uint64 `xml:",chardata"`
}

// Bytes is the size in bytes; libvirt's units are powers of 1024 for
// "KiB", "k", "K"…, and of 1000 for "KB", "MB"….
func (s Size) Bytes() (uint64, error) {
	mult := map[string]uint64{
		"": 1, "b": 1, "bytes": 1,
		"k": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mib": 1 << 20, "g": 1 << 30, "gib": 1 << 30,
		"t": 1 << 40, "tib": 1 << 40,
		"kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12,
	}[strings.ToLower(s.Unit)]
	if mult == 0 {
		return 0, fmt.Errorf("unknown unit %q", s.Unit)
	}
	if s.Value > ^uint64(0)/mult {
		return 0, fmt.Errorf("%d %s overflows", s.Value, s.Unit)
	}
	return s.Value * mult, nil
}

// OSXML is a domain's <os>.
type OSXML struct {
	Firmware string       `xml:"firmware,attr,omitempty"` // efi
	Type     OSType       `xml:"type"`
	Loader   *Loader      `xml:"loader,omitempty"`
	NVRAM    *NVRAM       `xml:"nvram,omitempty"`
	Kernel   string       `xml:"kernel,omitempty"`
	Initrd   string       `xml:"initrd,omitempty"`
	Cmdline  string       `xml:"cmdline,omitempty"`
	Boot     []BootDevice `xml:"boot"`
}

// OSType is <os><type arch machine>hvm</type>.
type OSType struct {
	Arch    string `xml:"arch,attr,omitempty"`
	Machine string `xml:"machine,attr,omitempty"`
	Value   string `xml:",chardata"`
}

// Loader is the firmware image.
type Loader struct {
	Readonly string `xml:"readonly,attr,omitempty"`
	Type     string `xml:"type,attr,omitempty"`
	Path     string `xml:",chardata"`
}

// NVRAM is the per-domain firmware variable store; undefining a domain
// that has one must say so.
type NVRAM struct {
	Template string `xml:"template,attr,omitempty"`
	Path     string `xml:",chardata"`
}

// BootDevice is one <boot dev=…/>.
type BootDevice struct {
	Dev string `xml:"dev,attr"` // hd, cdrom, network
}

// Features are the machine features the provider turns on.
type Features struct {
	ACPI *Empty `xml:"acpi"`
	APIC *Empty `xml:"apic"`
}

// Empty is an element that says something by being there.
type Empty struct{}

// CPUXML is a domain's <cpu>.
type CPUXML struct {
	Mode  string `xml:"mode,attr,omitempty"` // host-passthrough, maximum, custom
	Model string `xml:"model,omitempty"`
}

// Devices is a domain's <devices>.
type Devices struct {
	Emulator    string       `xml:"emulator,omitempty"`
	Disks       []Disk       `xml:"disk"`
	Controllers []Controller `xml:"controller"`
	Interfaces  []Interface  `xml:"interface"`
	Serials     []Serial     `xml:"serial"`
	Consoles    []Console    `xml:"console"`
	Channels    []Channel    `xml:"channel"`
	RNGs        []RNG        `xml:"rng"`
	// Others are the devices libvirt adds on its own (memballoon, video,
	// input, …), read only for their addresses.
	Others []OtherDevice `xml:",any"`
}

// OtherDevice is a device the provider does not model.
type OtherDevice struct {
	XMLName xml.Name
	Model   string   `xml:"model,attr,omitempty"`
	Address *Address `xml:"address,omitempty"`
}

// Disk is a <disk>.
type Disk struct {
	Type     string      `xml:"type,attr"`   // file, volume
	Device   string      `xml:"device,attr"` // disk, cdrom
	Driver   *DiskDriver `xml:"driver,omitempty"`
	Source   *DiskSource `xml:"source,omitempty"`
	Target   DiskTarget  `xml:"target"`
	ReadOnly *Empty      `xml:"readonly,omitempty"`
	Address  *Address    `xml:"address,omitempty"`
}

// DiskDriver says how QEMU reads the disk.
type DiskDriver struct {
	Name string `xml:"name,attr,omitempty"` // qemu
	Type string `xml:"type,attr,omitempty"` // qcow2, raw
}

// DiskSource is a file path or a volume in a pool.
type DiskSource struct {
	File   string `xml:"file,attr,omitempty"`
	Pool   string `xml:"pool,attr,omitempty"`
	Volume string `xml:"volume,attr,omitempty"`
}

// DiskTarget is the device name and bus the guest sees.
type DiskTarget struct {
	Dev string `xml:"dev,attr"`
	Bus string `xml:"bus,attr,omitempty"`
}

// Address is a device address; libvirt assigns PCI ones at define time.
type Address struct {
	Type       string `xml:"type,attr"`
	Domain     string `xml:"domain,attr,omitempty"`
	Bus        string `xml:"bus,attr,omitempty"`
	Slot       string `xml:"slot,attr,omitempty"`
	Function   string `xml:"function,attr,omitempty"`
	Controller string `xml:"controller,attr,omitempty"`
	Target     string `xml:"target,attr,omitempty"`
	Unit       string `xml:"unit,attr,omitempty"`
}

// PCISlot is the address's PCI bus and slot, when it is a PCI address.
func (a *Address) PCISlot() (bus, slot int, ok bool) {
	if a == nil || a.Type != "pci" {
		return 0, 0, false
	}
	b, err1 := strconv.ParseInt(a.Bus, 0, 32)
	s, err2 := strconv.ParseInt(a.Slot, 0, 32)
	if err1 != nil || err2 != nil {
		return 0, 0, false
	}
	return int(b), int(s), true
}

// Controller is a <controller>.
type Controller struct {
	Type    string   `xml:"type,attr"` // pci, scsi, usb, …
	Index   string   `xml:"index,attr,omitempty"`
	Model   string   `xml:"model,attr,omitempty"` // pci-root, pcie-root, virtio-scsi
	Address *Address `xml:"address,omitempty"`
}

// Interface is a network <interface>.
type Interface struct {
	Type    string           `xml:"type,attr"` // network, user
	MAC     *MAC             `xml:"mac,omitempty"`
	Source  *InterfaceSource `xml:"source,omitempty"`
	Model   *Model           `xml:"model,omitempty"`
	Address *Address         `xml:"address,omitempty"`
}

// MAC is an interface's hardware address.
type MAC struct {
	Address string `xml:"address,attr"`
}

// InterfaceSource names the libvirt network an interface is on.
type InterfaceSource struct {
	Network string `xml:"network,attr,omitempty"`
}

// Model is a device model.
type Model struct {
	Type string `xml:"type,attr"`
}

// Serial is a serial port, optionally logged to a file on the host.
type Serial struct {
	Type   string        `xml:"type,attr"` // pty
	Target *SerialTarget `xml:"target,omitempty"`
	Log    *CharLog      `xml:"log,omitempty"`
}

// SerialTarget is the guest side of a serial port.
type SerialTarget struct {
	Type string `xml:"type,attr,omitempty"`
	Port string `xml:"port,attr,omitempty"`
}

// CharLog logs a character device's output to a file on the host.
type CharLog struct {
	File   string `xml:"file,attr"`
	Append string `xml:"append,attr,omitempty"`
}

// Console is a <console>.
type Console struct {
	Type   string        `xml:"type,attr"`
	Target *SerialTarget `xml:"target,omitempty"`
}

// Channel is a host-guest channel (the guest agent's).
type Channel struct {
	Type   string        `xml:"type,attr"` // unix
	Target ChannelTarget `xml:"target"`
}

// ChannelTarget is the guest end of a channel.
type ChannelTarget struct {
	Type string `xml:"type,attr"` // virtio
	Name string `xml:"name,attr,omitempty"`
}

// RNG is a virtio random number generator.
type RNG struct {
	Model   string     `xml:"model,attr"` // virtio
	Backend RNGBackend `xml:"backend"`
	Address *Address   `xml:"address,omitempty"`
}

// RNGBackend is where an RNG's entropy comes from.
type RNGBackend struct {
	Model  string `xml:"model,attr"` // random
	Device string `xml:",chardata"`
}

// QEMUCommandline passes arguments to QEMU as they are; the provider uses
// it for user-mode networking with a host port forward, which libvirt's
// own <interface type='user'> cannot express with QEMU's built-in slirp.
type QEMUCommandline struct {
	Args []QEMUArg `xml:"http://libvirt.org/schemas/domain/qemu/1.0 arg"`
}

// QEMUArg is one argument.
type QEMUArg struct {
	Value string `xml:"value,attr"`
}

// VolumeXML is a storage <volume>.
type VolumeXML struct {
	XMLName      xml.Name      `xml:"volume"`
	Type         string        `xml:"type,attr,omitempty"`
	Name         string        `xml:"name"`
	Key          string        `xml:"key,omitempty"`
	Capacity     *Size         `xml:"capacity,omitempty"`
	Allocation   *Size         `xml:"allocation,omitempty"`
	Target       *VolumeTarget `xml:"target,omitempty"`
	BackingStore *VolumeTarget `xml:"backingStore,omitempty"`
}

// VolumeTarget is where a volume (or its backing store) lives and its format.
type VolumeTarget struct {
	Path   string        `xml:"path,omitempty"`
	Format *VolumeFormat `xml:"format,omitempty"`
}

// VolumeFormat is a volume's format: qcow2, raw, iso.
type VolumeFormat struct {
	Type string `xml:"type,attr"`
}

// NetworkXML is a virtual <network>.
type NetworkXML struct {
	XMLName xml.Name       `xml:"network"`
	Name    string         `xml:"name"`
	UUID    string         `xml:"uuid,omitempty"`
	Forward *NetworkMode   `xml:"forward,omitempty"`
	Bridge  *NetworkBridge `xml:"bridge,omitempty"`
	IPs     []NetworkIP    `xml:"ip"`
}

// NetworkMode is a network's forward mode: nat, route, open, bridge; none is isolated.
type NetworkMode struct {
	Mode string `xml:"mode,attr,omitempty"`
}

// NetworkBridge is the host bridge a network uses.
type NetworkBridge struct {
	Name string `xml:"name,attr,omitempty"`
}

// NetworkIP is an address range of a network and its DHCP service.
type NetworkIP struct {
	Address string       `xml:"address,attr,omitempty"`
	Netmask string       `xml:"netmask,attr,omitempty"`
	Prefix  string       `xml:"prefix,attr,omitempty"`
	Family  string       `xml:"family,attr,omitempty"`
	DHCP    *NetworkDHCP `xml:"dhcp,omitempty"`
}

// NetworkDHCP is the DHCP service of a network range.
type NetworkDHCP struct {
	Ranges []DHCPRange `xml:"range"`
}

// DHCPRange is a range of leased addresses.
type DHCPRange struct {
	Start string `xml:"start,attr"`
	End   string `xml:"end,attr"`
}

// PoolXML is a storage <pool>.
type PoolXML struct {
	XMLName    xml.Name    `xml:"pool"`
	Type       string      `xml:"type,attr"` // dir, …
	Name       string      `xml:"name"`
	UUID       string      `xml:"uuid,omitempty"`
	Capacity   *Size       `xml:"capacity,omitempty"`
	Allocation *Size       `xml:"allocation,omitempty"`
	Available  *Size       `xml:"available,omitempty"`
	Target     *PoolTarget `xml:"target,omitempty"`
}

// PoolTarget is where a pool keeps its volumes.
type PoolTarget struct {
	Path string `xml:"path,omitempty"`
}

// marshalXML encodes v indented, as libvirt writes its own documents.
func marshalXML(v any) (string, error) {
	b, err := xml.MarshalIndent(v, "", "  ")
	if err != nil {
		return "", err
	}
	return string(b), nil
}

// unmarshalXML decodes a document libvirt returned.
func unmarshalXML(doc string, v any) error {
	return xml.Unmarshal([]byte(doc), v)
}
