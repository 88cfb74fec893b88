package sftp

import (
	"github.com/nodemgr/nodemgr/internal/drivers/execute"
	"github.com/nodemgr/nodemgr/internal/drivers/execute/records"
	"github.com/nodemgr/nodemgr/internal/drivers/execute/ssh"
)

func init() {
	d := records.SFTP
	d.New = ssh.Over(New, func(s *ssh.SSH) (*SFTP, error) { return NewWith(s), nil })
	execute.Register(d)
}
