// Package procenv is the environment nodemgr gives the processes it starts
// for users: suite hooks, task workers and the tasks they run, services
// and their drain commands. None of them inherits the agent's environment,
// which holds its secrets (NODEMGR_JOIN_TOKEN, NODEMGR_LOCAL_API_TOKEN, an
// operator's NODEMGR_TOKEN) and whatever else its service manager or shell
// put there; they get only a few variables every program expects, plus
// what their spec sets and the NODEMGR_* variables nodemgr hands them on
// purpose.
package procenv

import "os"

// Inherited are the only variables taken from the agent's environment,
// when they are set there.
var Inherited = []string{"PATH", "HOME", "LANG", "TZ"}

// DefaultPath is PATH when the agent has none, so that a command's
// programs are still found.
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Base is the environment a started process begins with: the Inherited
// variables that getenv has (PATH always), as KEY=VALUE.
func Base(getenv func(string) string) []string {
	env := make([]string, 0, len(Inherited))
	for _, k := range Inherited {
		v := getenv(k)
		if k == "PATH" && v == "" {
			v = DefaultPath
		}
		if v != "" {
			env = append(env, k+"="+v)
		}
	}
	return env
}

// Clean is Base of this process's environment.
func Clean() []string { return Base(os.Getenv) }
