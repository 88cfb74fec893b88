package pgtest

import (
	"os"
	"os/user"
	"strconv"
	"syscall"
)

// serverUser is the user to run PostgreSQL as: nil (the tests' own) unless
// the tests run as root, which PostgreSQL refuses; then nobody.
func serverUser() (*account, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("nobody")
	if err != nil {
		return nil, errNoUser
	}
	uid, err1 := strconv.Atoi(u.Uid)
	gid, err2 := strconv.Atoi(u.Gid)
	if err1 != nil || err2 != nil {
		return nil, errNoUser
	}
	return &account{uid: uid, gid: gid}, nil
}

// sysProcAttr runs a command as owner (nil: as the tests). With
// dieWithParent, the kernel stops the command (SIGQUIT: PostgreSQL's
// immediate shutdown) when the thread that started it ends, as it does
// when the test binary dies without stopping it (killed, or timed out), so
// that no server outlives its tests.
func sysProcAttr(owner *account, dieWithParent bool) *syscall.SysProcAttr {
	attr := &syscall.SysProcAttr{}
	if dieWithParent {
		attr.Pdeathsig = syscall.SIGQUIT
	}
	if owner != nil {
		attr.Credential = &syscall.Credential{Uid: uint32(owner.uid), Gid: uint32(owner.gid)}
	}
	return attr
}
