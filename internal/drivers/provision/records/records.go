// Package records describes every provider nodemgr has apart from the
// code that runs it: names, the order people read them in, the keys a
// template's block may set for each. The providers register these very
// records with their code added (provision.Register), so there is one of
// each. A build without that code, the client build (-tags clientonly),
// still checks templates and mappings against them and names them in its
// help (Describe), without linking the cloud SDKs and engine clients.
package records

import "github.com/nodemgr/nodemgr/internal/drivers/provision"

// Providers, without their constructors.
var (
	Local = provision.Driver{Name: "local", Order: 10,
		ExtraKeys: []string{}, // the host is what it is: nothing to set
		OnHost:    true}
	Docker = provision.Driver{Name: "docker", Order: 20,
		ExtraKeys: []string{"hostname", "network_mode", "env", "command", "entrypoint", "labels", "privileged", "pull"},
		OnHost:    true} // containers on this machine's engine
	// Libvirt: where its machines run, it says itself (Locality). diskGB,
	// network, iso and image_type are seed 000's; the ssh_ keys are not
	// read by the provider: the deployment carries them to the ssh
	// executor.
	Libvirt = provision.Driver{Name: "libvirt", Order: 30, ExtraKeys: []string{
		"arch", "machine", "domain_type",
		"image_type", "base_image", "iso", "kernel", "initrd", "cmdline",
		"diskGB", "pool",
		"network", "network_mode", "ssh_port",
		"user_data", "ssh_authorized_keys", "hostname", provision.ExtraBootstrap,
		"console_log",
		"ssh_user", "ssh_identity_file", "ssh_jump_host",
	}}
	AWS = provision.Driver{Name: "aws", Order: 40, ExtraKeys: []string{
		"ami", "image_type", "ami_lookup", "instance_type", "subnet", "security_groups",
		"key_name", "user_data", "spot", "max_price", "hibernation", "tags", provision.ExtraBootstrap,
	}}
)

// All lists the providers' records.
func All() []provision.Driver { return []provision.Driver{Local, Docker, Libvirt, AWS} }

// Describe registers every record without its code, for a build that
// checks templates but makes no machine (the client build).
func Describe() {
	for _, d := range All() {
		provision.Describe(d)
	}
}
