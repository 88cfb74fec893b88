package ssh

import (
	"fmt"

	"github.com/nodemgr/nodemgr/internal/drivers/execute/records"

	"github.com/nodemgr/nodemgr/internal/drivers/execute"
)

func init() {
	d := records.SSH
	d.New = func(env execute.Env) (execute.Executor, error) {
		s, err := New(env.Settings)
		if err != nil {
			return nil, err
		}
		return s, nil
	}
	d.Settings = settingNames
	execute.Register(d)
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

// Over is the constructor of an executor that goes over ssh: given an ssh
// executor to share (env.Executor), with builds on that one; without one
// (a settings check), own makes an executor with connections of its own.
func Over[E execute.Executor](own func(settings map[string]string) (E, error), with func(*SSH) (E, error)) func(execute.Env) (execute.Executor, error) {
	return func(env execute.Env) (execute.Executor, error) {
		var e E
		var err error
		if env.Executor == nil {
			e, err = own(env.Settings)
		} else {
			var s *SSH
			if s, err = Shared(env); err == nil {
				e, err = with(s)
			}
		}
		if err != nil {
			return nil, err // not e: a typed nil would be a non-nil Executor
		}
		return e, nil
	}
}
