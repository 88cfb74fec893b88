package dockerexec

import (
	"github.com/nodemgr/nodemgr/internal/drivers/execute"
	"github.com/nodemgr/nodemgr/internal/drivers/execute/records"
)

func init() {
	d := records.Docker
	d.New = newFromEnv
	execute.Register(d)
}

// newFromEnv makes the executor with the docker provider's host setting,
// so that it reaches the engine the containers were made on.
func newFromEnv(env execute.Env) (execute.Executor, error) {
	var s map[string]string
	if host := env.Providers["docker"]["host"]; host != "" {
		s = map[string]string{"host": host}
	}
	d, err := New(s)
	if err != nil {
		return nil, err
	}
	return d, nil
}
