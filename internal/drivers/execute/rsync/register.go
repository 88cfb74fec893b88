package rsync

import (
	"github.com/nodemgr/nodemgr/internal/drivers/execute"
	"github.com/nodemgr/nodemgr/internal/drivers/execute/ssh"
	"github.com/nodemgr/nodemgr/internal/drivers/execute/records"
)

func init() {
	d := records.Rsync
	d.New = ssh.Over(New, NewWith)
	execute.Register(d)
}
