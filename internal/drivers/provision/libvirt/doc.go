// Package libvirt is the "libvirt" provider: each machine is a virtual
// machine (a libvirt domain), driven through libvirtd's RPC protocol with
// github.com/digitalocean/go-libvirt, never virsh or the C library.
//
// Settings (provision.New("libvirt", settings)):
//
//	uri            the daemon: qemu:///system (default), qemu:///session,
//	               qemu+ssh://[user@]host/system, test:///default (libvirt's
//	               in-memory test driver: state lives as long as the
//	               connection). A local daemon is reached through its unix
//	               socket (?socket=PATH picks another).
//	pool           storage pool for the machines' volumes; default "default".
//	               Made when the daemon lacks it (a fresh libvirtd has no
//	               pool): a directory pool at pool_dir, built, started and
//	               autostarted; started when it is stopped
//	pool_dir       that pool's directory on the libvirt host; default
//	               /var/lib/libvirt/images (where virt-manager puts "default")
//	domain_type    qemu (default: emulation, TCG, works anywhere) or kvm
//	stop_timeout   how long stop and reboot wait for the guest before they
//	               power it off or reset it, a Go duration; default 30s
//	ready_timeout  how long Provision waits for the guest's SSH server;
//	               default 5m; 0 does not wait (Address may then be empty)
//
// Extra keys Provision understands (any other key, such as image, the
// generic name that mappings translate, or another provider's override, is
// ignored):
//
//	cpu, memoryMB  vCPUs (whole) and memory in MiB; default 1 and 512
//	diskGB         size of the root disk in GiB (seed 000's key); else diskMB
//	image_type     the boot source: qcow2, iso or kernel; default the first
//	               of kernel, iso, base_image that is set
//	base_image     qcow2 (or raw) base image: a volume of the pool, or an
//	               absolute path on the libvirt host. The machine's root
//	               disk is a new qcow2 volume backed by it (copy on write),
//	               as large as diskGB or the base, whichever is larger.
//	iso            an ISO, as a volume of the pool or a host path, booted
//	               from a SCSI CD-ROM; with diskGB a blank root disk is added
//	kernel, initrd, cmdline
//	               direct kernel boot (host paths); with base_image or
//	               diskGB the guest also gets a root disk as /dev/vda
//	pool           storage pool, overriding the setting; never made or
//	               started here: one missing or stopped is refused with the
//	               virsh commands that make or start it
//	network        an existing libvirt network (seed 000's "network:
//	               default"): the guest's address comes from the network's
//	               DHCP leases, else from the guest agent
//	network_mode   network (default when network is set) or user: QEMU's
//	               user-mode networking, with the guest's port 22 forwarded
//	               from 127.0.0.1 on the host (a local daemon only)
//	ssh_port       the host port user-mode networking forwards; default a
//	               free one
//	user_data      cloud-init user data (text, or a map written as
//	               #cloud-config), on a NoCloud seed ISO labelled cidata
//	               (attached read-only as the next virtio disk)
//	ssh_authorized_keys
//	               keys for the template's user, as a generated
//	               #cloud-config, when there is no user_data
//	hostname       the NoCloud local-hostname; default the machine name
//	arch           x86_64 (amd64) or aarch64 (arm64); default the server's
//	machine        QEMU machine type; default libvirt's (virt on aarch64)
//	domain_type    qemu or kvm, overriding the setting
//	console_log    host path the serial console is logged to
//	user           the template's user: the deployment's ssh_user, unless
//	               the template sets ssh_user itself
//	ssh_user, ssh_identity_file, ssh_jump_host
//	               not read here: the deployment carries them to the ssh
//	               executor (ssh_port, above, is its port too)
//
// A known key holding the wrong type or value is refused as
// errdefs.Field("extra.<key>", ...). The keys are declared to package
// mapping, so overrides.libvirt naming another key is refused.
//
// Libvirt domains have no labels: the spec's labels, plus
// nodemgr.deployment (the machine name) and nodemgr.template, live in the
// domain's <metadata> under the namespace https://nodemgr.dev/xmlns/libvirt/1,
// beside the volumes made for the machine and the forwarded SSH port.
// Find lists domains by them (the orchestrator's sweep); a deployment's
// ResourceID is the domain's UUID, by which State and Destroy find it.
//
// Provision defines the domain first, then makes its volumes and starts
// it, so a crash at any step leaves a labelled domain that Find lists and
// Destroy removes with its volumes; on error it removes what it made. It
// returns once the guest's SSH server sends its "SSH-2.0-" banner (a TCP
// connect proves nothing: user-mode networking accepts before the guest
// listens). Deployments offer exec:ssh, copy:sftp and copy:rsync, with
// Address host:port and the user in Extra["ssh_user"].
//
// Lifecycle: start (also restores a hibernated machine and resumes a
// paused one); stop (ACPI shutdown, powered off after stop_timeout);
// hibernate (managed save); reboot (the guest's own, reset after
// stop_timeout); terminate (as Destroy: power off, the volumes, then
// undefine with its managed save image and NVRAM). States map onto EC2's
// (see State); StateReason adds libvirt's reason where a person can act
// on it (a crashed guest, a disk error that paused it).
//
// Images are not downloaded: a template's base_image names a cloud image
// already on the libvirt host (Debian's genericcloud or Ubuntu's cloud
// qcow2, which run cloud-init from the NoCloud seed); docs/provisioning.md
// says how to fetch one. The package's tests boot a guest made from the Debian
// kernel package instead (libvirttest.Guest): a few MB through apt,
// cached, rather than a cloud image's hundreds.
package libvirt
