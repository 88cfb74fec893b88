package sftp

import (
	"github.com/nodemgr/nodemgr/internal/drivers/execute"
	"github.com/nodemgr/nodemgr/internal/drivers/execute/ssh"
)

func init() {
	execute.Register(execute.Driver{
		Name:       "sftp",
		Capability: Capability,
		Order:      40,
		New:        ssh.Over(New, func(s *ssh.SSH) (*SFTP, error) { return NewWith(s), nil }),
		SettingsOf: "ssh",
	})
}
