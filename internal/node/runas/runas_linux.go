package runas

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/user"
	"slices"
	"strings"
	"syscall"
)

func canSwitch() bool { return os.Geteuid() == 0 }

// mayEnter says whether u has search permission on the directory fi.
func mayEnter(fi fs.FileInfo, u User) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	perm := fi.Mode().Perm()
	switch {
	case !ok, u.UID == 0:
		return true
	case st.Uid == u.UID:
		return perm&0o100 != 0
	case st.Gid == u.GID || slices.Contains(u.Groups, st.Gid):
		return perm&0o010 != 0
	}
	return perm&0o001 != 0
}

func current() (User, error) {
	u, err := user.Current()
	if err != nil {
		// No passwd entry (a container's arbitrary uid): ids will do.
		return User{UID: uint32(os.Getuid()), GID: uint32(os.Getgid())}, nil
	}
	return fromOS(u)
}

// nologinShells are tried in order as TaskUser's shell: it must not log in.
var nologinShells = []string{"/usr/sbin/nologin", "/sbin/nologin", "/bin/false"}

// ensureTaskUser finds TaskUser, or creates it as a system account with
// its own group, no home and a shell that refuses logins. how says which.
func ensureTaskUser() (u User, how string, err error) {
	if u, err := Lookup(TaskUser); err == nil {
		return u, "existing", nil
	}
	useradd, err := exec.LookPath("useradd")
	if err != nil {
		return User{}, "", fmt.Errorf("create user %s: no useradd on this machine: %w", TaskUser, err)
	}
	shell := nologinShells[len(nologinShells)-1]
	for _, s := range nologinShells {
		if _, err := os.Stat(s); err == nil {
			shell = s
			break
		}
	}
	out, err := exec.Command(useradd, "--system", "--user-group", "--no-create-home",
		"--home-dir", "/nonexistent", "--shell", shell,
		"--comment", "nodemgr tasks", TaskUser).CombinedOutput()
	if u, lerr := Lookup(TaskUser); lerr == nil {
		// Made now, or by another agent on this machine at the same time.
		return u, "created", nil
	}
	if err == nil {
		err = errors.New("useradd succeeded, yet the user cannot be found")
	}
	return User{}, "", fmt.Errorf("create user %s: %w: %s", TaskUser, err, strings.TrimSpace(string(out)))
}
