package rsync

import (
	"github.com/nodemgr/nodemgr/internal/drivers/execute"
	"github.com/nodemgr/nodemgr/internal/drivers/execute/ssh"
)

func init() {
	execute.Register(execute.Driver{
		Name:       "rsync",
		Capability: Capability,
		Order:      50,
		New:        ssh.Over(New, NewWith),
		SettingsOf: "ssh",
	})
}
