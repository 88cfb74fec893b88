package gocrash

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestSignal(t *testing.T) {
	cases := []struct {
		name   string
		status int
		stderr string
		want   string
	}{
		{"nil dereference", 2, "panic: runtime error: invalid memory address or nil pointer dereference\n" +
			"[signal SIGSEGV: segmentation violation code=0x1 addr=0x0 pc=0x489cff]\n\ngoroutine 1 [running]:\nmain.main()\n", "SIGSEGV"},
		{"unexpected fault", 2, "unexpected fault address 0x7f65a3407000\nfatal error: fault\n" +
			"[signal SIGSEGV: segmentation violation code=0x2 addr=0x7f65a3407000 pc=0x489d75]\n\ngoroutine 1 gp=0x3e m=0 [running]:\n", "SIGSEGV"},
		{"unexpected signal in the runtime", 2, "fatal error: unexpected signal during runtime execution\n" +
			"[signal SIGBUS: bus error code=0x2 addr=0x7f0000 pc=0x4011]\n", "SIGBUS"},
		{"signal the runtime could not turn into a panic", 2, "SIGILL: illegal instruction\nPC=0x40816e m=0 sigcode=2 addr=0x4993\n\ngoroutine 1 [running]:\n", "SIGILL"},
		{"floating point", 2, "[signal SIGFPE: floating-point exception code=0x1 addr=0x0 pc=0x1]\n", "SIGFPE"},
		{"CRLF", 2, "panic: x\r\n[signal SIGSEGV: segmentation violation code=0x1 addr=0x0 pc=0x489cff]\r\n", "SIGSEGV"},
		{"plain panic", 2, "panic: boom\n\ngoroutine 1 [running]:\n", ""},
		{"integer divide by zero", 2, "panic: runtime error: integer divide by zero\n\ngoroutine 1 [running]:\n", ""},
		{"other exit status", 1, "[signal SIGSEGV: segmentation violation code=0x1 addr=0x0 pc=0x489cff]\n", ""},
		{"not a fault signal", 2, "[signal SIGPIPE: broken pipe code=0x1 addr=0x0 pc=0x1]\n", ""},
		{"wrong description", 2, "[signal SIGSEGV: bus error code=0x1 addr=0x0 pc=0x1]\n", ""},
		{"quoted inside a line", 2, "log: saw [signal SIGSEGV: segmentation violation code=0x1 addr=0x0 pc=0x1]\n", ""},
		{"fatal line without PC line", 2, "SIGSEGV: segmentation violation\nand more\n", ""},
		{"SIGABRT", 2, "SIGABRT: abort\nPC=0x40816e m=0 sigcode=0\n", ""},
		{"empty", 2, "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := Signal(tc.status, tc.stderr); got != tc.want {
				t.Errorf("Signal(%d, %q) = %q, want %q", tc.status, tc.stderr, got, tc.want)
			}
		})
	}
}

// The formats are the Go runtime's own, as this toolchain prints them.
func TestSignalOfARealGoCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a program")
	}
	dir := t.TempDir()
	src := `package main

import (
	"os"
	"syscall"
)

func main() {
	if os.Args[1] == "nil" {
		var p *int
		println(*p)
	}
	syscall.Kill(os.Getpid(), syscall.SIGSEGV)
	select {}
}
`
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module crash\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	build := exec.Command("go", "build", "-o", "crash", ".")
	build.Dir = dir
	if out, err := build.CombinedOutput(); err != nil {
		t.Skipf("go build: %v\n%s", err, out)
	}
	for _, mode := range []string{"nil", "raw"} {
		t.Run(mode, func(t *testing.T) {
			var stderr strings.Builder
			cmd := exec.Command(filepath.Join(dir, "crash"), mode)
			cmd.Stderr = &stderr
			cmd.Env = append(os.Environ(), "GOTRACEBACK=single")
			cmd.Run()
			code := cmd.ProcessState.ExitCode()
			if got := Signal(code, stderr.String()); got != "SIGSEGV" {
				t.Errorf("Signal(%d, %q) = %q, want SIGSEGV", code, stderr.String(), got)
			}
		})
	}
}
