//go:build unix

package runas

import "syscall"

// Credential is u as os/exec and syscall start processes.
func (u User) Credential() *syscall.Credential {
	return &syscall.Credential{Uid: u.UID, Gid: u.GID, Groups: u.Groups}
}
