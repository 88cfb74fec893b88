package agent

import (
	"io/fs"
	"slices"
	"syscall"

	"github.com/nodemgr/nodemgr/internal/runas"
)

// mayEnter says whether u has search permission on the directory fi.
func mayEnter(fi fs.FileInfo, u runas.User) bool {
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
