// Package runas picks the users that an agent runs other people's code as:
// suite tasks and hooks (a suite's run_as) and services (their user).
//
// Code that names no user runs as an unprivileged one, never as the
// agent's: a dedicated system user, TaskUser, that the agent creates when
// the machine lacks it, else nobody, or the unprivileged user its config
// names instead (task_user: a pool machine's template user). The agent's own user (root, most
// often) is for suites that ask for it by a privileged name (Root, Agent),
// which the server grants to group admins only. An agent that does not run
// as root cannot start processes as anyone else: its Policy then runs
// everything as itself, and refuses a spec that names another user rather
// than run it as the wrong one.
package runas

import (
	"fmt"
	"log/slog"
	"os"
	"os/user"
	"path/filepath"
	"strconv"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/base/workload"
)

// TaskUser is the account the agent creates for code that names no user.
const TaskUser = "nodemgr-task"

// Privileged run_as names: a suite that says one of them runs with the
// agent's own rights, so the server takes it only from an admin of the
// suite's group.
const (
	Root  = api.RunAsRoot  // root, and so only where the agent is root
	Agent = api.RunAsAgent // whatever user the agent runs as
)

// User is an account of this machine that a process can be started as.
type User struct {
	Name     string
	UID, GID uint32
	Groups   []uint32 // supplementary groups
}

func (u User) String() string {
	if u.Name == "" {
		return "uid " + strconv.FormatUint(uint64(u.UID), 10)
	}
	return fmt.Sprintf("%s (uid %d)", u.Name, u.UID)
}

// Lookup finds a user by name, or by numeric uid, with its primary and
// supplementary groups.
func Lookup(name string) (User, error) {
	u, err := user.Lookup(name)
	if err != nil {
		if _, nerr := strconv.ParseUint(name, 10, 32); nerr == nil {
			u, err = user.LookupId(name)
		}
	}
	if err != nil {
		return User{}, fmt.Errorf("look up user %s: %w", name, err)
	}
	return fromOS(u)
}

func fromOS(u *user.User) (User, error) {
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return User{}, fmt.Errorf("user %s: uid %q: %w", u.Username, u.Uid, err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return User{}, fmt.Errorf("user %s: gid %q: %w", u.Username, u.Gid, err)
	}
	out := User{Name: u.Username, UID: uint32(uid), GID: uint32(gid)}
	ids, err := u.GroupIds()
	if err != nil {
		return User{}, fmt.Errorf("user %s: supplementary groups: %w", u.Username, err)
	}
	for _, id := range ids {
		if g, err := strconv.ParseUint(id, 10, 32); err == nil {
			out.Groups = append(out.Groups, uint32(g))
		}
	}
	return out, nil
}

// CanSwitch says whether this process may start others as other users
// (it runs as root on Linux): an agent here runs suites and services as
// other users.
func CanSwitch() bool { return canSwitch() }

// Policy is how one agent picks users.
type Policy struct {
	Self User // the agent's own user
	// Switch: the agent may start processes as other users (it is root).
	Switch bool
	// Default runs code that names no user: TaskUser or nobody where the
	// agent may switch, else Self.
	Default User
}

// NewPolicy looks at who this process is and picks the user that code
// naming none runs as: taskUser where the agent's config names one (a
// pool machine's template user), else TaskUser, found or created where
// the agent runs as root (else nobody). It says in log which, and why.
func NewPolicy(log *slog.Logger, taskUser string) (Policy, error) {
	self, err := current()
	if err != nil {
		return Policy{}, err
	}
	p := Policy{Self: self, Switch: canSwitch(), Default: self}
	if taskUser != "" {
		if p.Default, err = p.configured(taskUser); err != nil {
			return Policy{}, err
		}
		log.Info("suite tasks, hooks and services that name no user run as the configured task_user", "user", p.Default.String())
		return p, nil
	}
	if !p.Switch {
		log.Warn("the agent does not run as root, so it cannot start processes as other users: "+
			"suite tasks, hooks and services run as the agent's own user and can read its data dir; run the agent as root to isolate them",
			"user", self.String())
		return p, nil
	}
	u, how, err := ensureTaskUser()
	if err != nil {
		log.Warn("cannot make the task user; suite tasks, hooks and services that name no user run as nobody",
			"want", TaskUser, "err", err)
		if u, err = nobody(); err != nil {
			return Policy{}, err
		}
		how = "fallback"
	}
	p.Default = u
	log.Info("suite tasks, hooks and services that name no user run as an unprivileged user", "user", u.String(), "account", how)
	return p, nil
}

// configured checks the agent's task_user setting. It must be an
// existing user other than root: the default is what anyone who may
// create a suite gets, so it never carries the agent's rights by name
// (the server grants those to group admins only). An agent that is not
// root can start nobody but itself.
func (p Policy) configured(name string) (User, error) {
	const field = "task_user"
	if err := workload.CheckUser(field, name); err != nil {
		return User{}, err
	}
	if workload.Privileged(name) {
		return User{}, errdefs.Field(field, "%q would give code that names no user the agent's rights; name an unprivileged user, or leave %s out for %s", name, field, TaskUser)
	}
	u, err := Lookup(name)
	switch {
	case err != nil:
		return User{}, errdefs.Field(field, "%q is not a user on this machine (%v): create it, or leave %s out for %s", name, err, field, TaskUser)
	case u.UID == 0:
		return User{}, errdefs.Field(field, "%q is root (uid 0); name an unprivileged user, or leave %s out for %s", name, field, TaskUser)
	case !p.Switch && u.UID != p.Self.UID:
		return User{}, errdefs.Field(field, "the agent runs as %s, not root, so it cannot start processes as %q: run the agent as root, or leave %s out", p.Self, name, field)
	}
	return u, nil
}

// nobody is the nobody account, or uid and gid 65534 where the machine
// has none by that name.
func nobody() (User, error) {
	if u, err := Lookup("nobody"); err == nil {
		return u, nil
	}
	return User{Name: "nobody", UID: 65534, GID: 65534}, nil
}

// Resolve is the user that code naming name (a suite's run_as, a
// service's user; "" for none) runs as. field names the spec's field in
// errors, which say what to do instead.
func (p Policy) Resolve(field, name string) (User, error) {
	if err := workload.CheckUser(field, name); err != nil {
		return User{}, err
	}
	switch {
	case name == "":
		return p.Default, nil
	case name == Agent:
		return p.Self, nil
	case !p.Switch:
		if name == p.Self.Name || name == strconv.FormatUint(uint64(p.Self.UID), 10) {
			return User{}, errdefs.Field(field, "%q is the agent's own user: say %s: %s (a group admin's spec only), or leave %s out", name, field, Agent, field)
		}
		return User{}, errdefs.Field(field, "the agent runs as %s, not root, so it cannot start processes as %q: run the agent as root, or leave %s out (they then run as the agent's user)",
			p.Self, name, field)
	}
	u, err := Lookup(name)
	if err != nil {
		return User{}, errdefs.Field(field, "%q is not a user on this node (%v): create it first, or leave %s out for an unprivileged default", name, err, field)
	}
	switch {
	case u.UID == 0 && name != Root && name != "0":
		return User{}, errdefs.Field(field, "%q is root (uid 0): say %s: %s (a group admin's spec only), or name an unprivileged user", name, field, Root)
	case u.UID == p.Self.UID && u.UID != 0:
		return User{}, errdefs.Field(field, "%q is the agent's own user: say %s: %s (a group admin's spec only), or name another user", name, field, Agent)
	}
	return u, nil
}

// Reach checks that u may pass through every directory above path, as a
// process of u's must to reach path (its work dir, its program); the
// error says which directory stops it and what to do.
func Reach(u User, path string) error {
	var dirs []string
	for d := filepath.Dir(path); ; d = filepath.Dir(d) {
		dirs = append(dirs, d)
		if d == filepath.Dir(d) {
			break
		}
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		fi, err := os.Stat(dirs[i])
		if err != nil {
			return err
		}
		if !mayEnter(fi, u) {
			return fmt.Errorf("user %s cannot reach %s: %s is mode %s; let others pass (chmod o+x %s), or move it under directories they may pass",
				u, path, dirs[i], fi.Mode().Perm(), dirs[i])
		}
	}
	return nil
}

// Other says whether starting code as u needs a switch away from the
// agent's own user.
func (p Policy) Other(u User) bool {
	return p.Switch && (u.UID != p.Self.UID || u.GID != p.Self.GID)
}
