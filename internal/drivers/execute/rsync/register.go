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
			r, err := NewWith(s)
			if err != nil {
				return nil, err
			}
			return r, nil
		},
		SettingsOf: "ssh",
	})
}
