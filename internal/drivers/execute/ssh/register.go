package ssh

import (
	"fmt"

	"github.com/nodemgr/nodemgr/internal/drivers/execute"
)

func init() {
	execute.Register(execute.Driver{
		Name:       "ssh",
		Capability: Capability,
		Order:      30,
		New: func(env execute.Env) (execute.Executor, error) {
			s, err := New(env.Settings)
			if err != nil {
				return nil, err
			}
			return s, nil
		},
		Settings: settingNames,
	})
}

// Shared returns the ssh executor env shares, so that the executors that
// go over ssh (sftp, rsync) use one set of connections per machine.
func Shared(env execute.Env) (*SSH, error) {
	if env.Executor == nil {
		return nil, fmt.Errorf("no ssh executor to share")
	}
	e, err := env.Executor("ssh")
	if err != nil {
		return nil, err
	}
	s, ok := e.(*SSH)
	if !ok {
		return nil, fmt.Errorf("the ssh executor is a %T, not this package's", e)
	}
	return s, nil
}
