package local

import "github.com/nodemgr/nodemgr/internal/drivers/execute"

func init() {
	execute.Register(execute.Driver{
		Name:       "local",
		Capability: Capability,
		Order:      10,
		New:        func(execute.Env) (execute.Executor, error) { return New(), nil },
		OnHost:     true,
	})
}
