package rsync

import (
	"github.com/nodemgr/nodemgr/internal/drivers/execute"
	"github.com/nodemgr/nodemgr/internal/drivers/execute/records"
	"github.com/nodemgr/nodemgr/internal/drivers/execute/ssh"
)

func init() {
	d := records.Rsync
	d.New = ssh.Over(New, NewWith)
	execute.Register(d)
}
