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
		New: func(env execute.Env) (execute.Executor, error) {
			if env.Executor == nil { // nothing to share: connections of its own
				own, err := New(env.Settings)
				if err != nil {
					return nil, err
				}
				return own, nil
			}
			s, err := ssh.Shared(env)
			if err != nil {
				return nil, err
			}
			return NewWith(s), nil
		},
		SettingsOf: "ssh",
	})
}
