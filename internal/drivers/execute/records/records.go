// Package records describes every executor nodemgr has apart from the
// code that runs it: its name, capability and order. The executors
// register these very records with their code added (execute.Register).
// The client build (-tags clientonly) registers them alone (Describe), to
// name them in its help without linking the SSH and engine clients.
package records

import "github.com/nodemgr/nodemgr/internal/drivers/execute"

// Executors' capabilities, as deployments list them.
const (
	CapLocal  = "exec:local"
	CapDocker = "exec:docker"
	CapSSH    = "exec:ssh"
	CapSFTP   = "copy:sftp"
	CapRsync  = "copy:rsync"
)

// Executors, without their constructors.
var (
	Local  = execute.Driver{Name: "local", Capability: CapLocal, Order: 10, OnHost: true}
	Docker = execute.Driver{Name: "docker", Capability: CapDocker, Order: 20, OnHost: true} // containers on this machine's engine
	SSH    = execute.Driver{Name: "ssh", Capability: CapSSH, Order: 30}
	SFTP   = execute.Driver{Name: "sftp", Capability: CapSFTP, Order: 40, SettingsOf: "ssh"}
	Rsync  = execute.Driver{Name: "rsync", Capability: CapRsync, Order: 50, SettingsOf: "ssh"}
)

// All lists the executors' records.
func All() []execute.Driver { return []execute.Driver{Local, Docker, SSH, SFTP, Rsync} }

// Describe registers every record without its code, for a build that
// runs no command (the client build).
func Describe() {
	for _, d := range All() {
		execute.Describe(d)
	}
}
