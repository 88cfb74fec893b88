package local

import (
	"github.com/nodemgr/nodemgr/internal/drivers/execute"
	"github.com/nodemgr/nodemgr/internal/drivers/execute/records"
)

func init() {
	d := records.Local
	d.New = func(execute.Env) (execute.Executor, error) { return New(), nil }
	execute.Register(d)
}
