package workload

import (
	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/base/validate"
)

// Privileged says whether a run_as or user value asks for the agent's
// rights: root by name or uid, or the agent's own user.
func Privileged(name string) bool {
	return name == api.RunAsRoot || name == api.RunAsAgent || name == "0"
}

// userRE is what a user name (or numeric uid) may look like in a spec:
// useradd's portable set, a little wider for existing accounts.
var userRE = validate.NewPattern(`^[A-Za-z0-9_][A-Za-z0-9._-]*$`, 32)

// CheckUser checks the form of a run_as or user value; "" is the default.
func CheckUser(field, name string) error {
	if name != "" && !userRE.MatchString(name) {
		return errdefs.Field(field, "%q is not a user name (letters, digits, '.', '_' and '-', at most 32) or a numeric uid", name)
	}
	return nil
}
