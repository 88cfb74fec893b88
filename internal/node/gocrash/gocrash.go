// Package gocrash recognises a Go program that died of a hardware fault.
//
// The Go runtime turns SIGSEGV, SIGBUS, SIGFPE and SIGILL into a panic or
// a fatal error, prints what happened on stderr and exits with status 2:
// to its parent it looks like any program that exited 2. The node's crash
// rules count hardware faults apart (a task is given up after 2 of them,
// against 3 of other failures), so the worker pool and the command worker
// read the end of a dead program's stderr with Signal to tell the two
// apart. Only the runtime's own formats are recognised, line for line; a
// program that merely mentions a signal does not match.
package gocrash

import (
	"regexp"
	"strings"
)

// goExitStatus is the status the Go runtime exits with after a fatal
// panic or error.
const goExitStatus = 2

// faults are the hardware-fault signals, with the runtime's description
// of each (runtime/sigtab_linux_generic.go).
var faults = map[string]string{
	"SIGSEGV": "segmentation violation",
	"SIGBUS":  "bus error",
	"SIGFPE":  "floating-point exception",
	"SIGILL":  "illegal instruction",
}

var (
	// A signal turned into a panic or a fatal error (runtime.dopanic_m):
	// "[signal SIGSEGV: segmentation violation code=0x1 addr=0x0 pc=0x489cff]".
	panicLine = regexp.MustCompile(`^\[signal (SIG[A-Z]+): ([a-z -]+) code=0x[0-9a-f]+ addr=0x[0-9a-f]+ pc=0x[0-9a-f]+\]$`)
	// A signal the runtime could not turn into a panic (runtime.sighandler):
	// "SIGSEGV: segmentation violation", then "PC=0x40816e m=0 sigcode=0 addr=0x4993".
	fatalLine = regexp.MustCompile(`^(SIG[A-Z]+): ([a-z -]+)$`)
	pcLine    = regexp.MustCompile(`^PC=0x[0-9a-f]+ m=[0-9]+ sigcode=[0-9]+( addr=0x[0-9a-f]+)?$`)
)

// Signal returns the hardware fault ("SIGSEGV", "SIGBUS", "SIGFPE",
// "SIGILL") a Go program reported dying of, given its exit status and the
// end of its stderr; "" if it did not (another exit status, another
// signal, no such report). The last report in the tail wins.
func Signal(exitStatus int, stderrTail string) string {
	if exitStatus != goExitStatus {
		return ""
	}
	lines := strings.Split(stderrTail, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		line := strings.TrimSuffix(lines[i], "\r")
		if m := panicLine.FindStringSubmatch(line); m != nil && faults[m[1]] == m[2] {
			return m[1]
		}
		if i+1 < len(lines) && pcLine.MatchString(lines[i+1]) {
			if m := fatalLine.FindStringSubmatch(line); m != nil && faults[m[1]] == m[2] {
				return m[1]
			}
		}
	}
	return ""
}
