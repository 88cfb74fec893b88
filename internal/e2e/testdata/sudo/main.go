// Command sudo stands in for sudo in test images, which are made without
// a registry or a package manager: installed setuid root, it runs its
// command as root without asking for a password, as sudo does for a user
// with a NOPASSWD rule, and it resets the environment as sudo does.
// Options (-n, -u root, --) are accepted and otherwise ignored.
package main

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"
)

func main() {
	args := os.Args[1:]
	for len(args) > 0 && len(args[0]) > 1 && args[0][0] == '-' {
		opt := args[0]
		args = args[1:]
		if opt == "--" {
			break
		}
		if opt == "-u" && len(args) > 0 {
			args = args[1:]
		}
	}
	if len(args) == 0 {
		fail("usage: sudo [-n] command [arg ...]")
	}
	if err := syscall.Setgroups(nil); err != nil {
		fail("setgroups: %v", err)
	}
	if err := syscall.Setgid(0); err != nil {
		fail("setgid: %v", err)
	}
	if err := syscall.Setuid(0); err != nil {
		fail("setuid: %v (is this binary setuid root?)", err)
	}
	path, err := exec.LookPath(args[0])
	if err != nil {
		fail("%s: command not found", args[0])
	}
	env := []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root", "USER=root", "LOGNAME=root"}
	fail("exec %s: %v", path, syscall.Exec(path, args, env))
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "sudo: "+format+"\n", args...)
	os.Exit(1)
}
