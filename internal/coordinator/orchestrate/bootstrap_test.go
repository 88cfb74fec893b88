package orchestrate

import (
	"context"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
	"github.com/nodemgr/nodemgr/internal/drivers/execute"
	"github.com/nodemgr/nodemgr/internal/drivers/provision"
)

// fakeELF writes the 64-byte header of a static ELF64 executable for
// machine: enough for CheckBinary, which reads the machine and looks for
// an interpreter among the (here no) program headers.
func fakeELF(t *testing.T, path string, machine elf.Machine) string {
	t.Helper()
	h := make([]byte, 64)
	copy(h, elf.ELFMAG)
	h[elf.EI_CLASS], h[elf.EI_DATA], h[elf.EI_VERSION] = byte(elf.ELFCLASS64), byte(elf.ELFDATA2LSB), byte(elf.EV_CURRENT)
	le := binary.LittleEndian
	le.PutUint16(h[16:], uint16(elf.ET_EXEC))
	le.PutUint16(h[18:], uint16(machine))
	le.PutUint32(h[20:], uint32(elf.EV_CURRENT))
	le.PutUint16(h[52:], 64) // e_ehsize
	le.PutUint16(h[54:], 56) // e_phentsize
	le.PutUint16(h[58:], 64) // e_shentsize
	if err := os.WriteFile(path, h, 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestBootstrapCandidatesByArch(t *testing.T) {
	both := t.TempDir()
	dirAMD := fakeELF(t, filepath.Join(both, "nodemgr-linux-amd64"), elf.EM_X86_64)
	dirARM := fakeELF(t, filepath.Join(both, "nodemgr-linux-arm64"), elf.EM_AARCH64)
	os.WriteFile(filepath.Join(both, "nodemgr-linux-amd64.modules"), []byte("not a binary"), 0o644)
	os.WriteFile(filepath.Join(both, "SHA256SUMS"), []byte("not a binary"), 0o644)
	armOnly := t.TempDir()
	onlyARM := fakeELF(t, filepath.Join(armOnly, "nodemgr-linux-arm64"), elf.EM_AARCH64)
	self := fakeELF(t, filepath.Join(t.TempDir(), "nodemgr"), elf.EM_X86_64)
	explicit := fakeELF(t, filepath.Join(t.TempDir(), "my-nodemgr"), elf.EM_AARCH64)

	for _, tc := range []struct {
		name    string
		cfg     BootstrapConfig
		arch    string // the machine's uname -m
		want    string // the binary delivered
		wantErr string
	}{
		{"the dir's binary for arm64", BootstrapConfig{BinaryDir: both, Self: self}, "aarch64", dirARM, ""},
		{"the dir's binary beats the server's own", BootstrapConfig{BinaryDir: both, Self: self}, "x86_64", dirAMD, ""},
		{"the server's own where the dir lacks the arch", BootstrapConfig{BinaryDir: armOnly, Self: self}, "x86_64", self, ""},
		{"the dir's where the server's own is of another arch", BootstrapConfig{BinaryDir: armOnly, Self: self}, "aarch64", onlyARM, ""},
		{"a binary given by name beats the dir", BootstrapConfig{Binaries: []string{explicit}, BinaryDir: both, Self: self}, "aarch64", explicit, ""},
		{"the server's own alone", BootstrapConfig{Self: self}, "x86_64", self, ""},
		{"no binary for the arch", BootstrapConfig{BinaryDir: both, Self: self}, "riscv64", "", "nodemgr-linux-riscv64"},
		{"nothing to deliver", BootstrapConfig{}, "x86_64", "", "--agent-binaries"},
		{"a missing dir", BootstrapConfig{BinaryDir: filepath.Join(both, "nope"), Self: self}, "x86_64", "", "agent_binaries"},
		{"a dir with no binaries", BootstrapConfig{BinaryDir: t.TempDir(), Self: self}, "x86_64", "", "holds no nodemgr-linux-ARCH binary"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bins, err := tc.cfg.candidates()
			var got Binary
			if err == nil {
				got, err = chooseBinary(bins, tc.arch)
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("binary for %s = %v, %v; want an error holding %q", tc.arch, got.Path, err, tc.wantErr)
				}
				return
			}
			if err != nil || got.Path != tc.want {
				t.Errorf("binary for %s = %v, %v; want %s", tc.arch, got.Path, err, tc.want)
			}
		})
	}
}

func TestReadBinaryDirRefusesAMisnamedBinary(t *testing.T) {
	dir := t.TempDir()
	fakeELF(t, filepath.Join(dir, "nodemgr-linux-amd64"), elf.EM_AARCH64)
	_, err := ReadBinaryDir(dir)
	if err == nil || !strings.Contains(err.Error(), "rename it nodemgr-linux-arm64") {
		t.Errorf("ReadBinaryDir(an arm64 binary named amd64) = %v, want a rename hint", err)
	}
}

func TestReadBinaryDirRefusesADynamicBinary(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "nodemgr-linux-amd64")
	// /bin/sh is dynamically linked on Debian: it has an interpreter.
	sh, err := os.ReadFile("/bin/sh")
	if err != nil {
		t.Skip("no /bin/sh to copy")
	}
	os.WriteFile(path, sh, 0o755)
	if !isDynamicX86(path) {
		t.Skip("/bin/sh here is not a dynamically linked x86_64 ELF")
	}
	if _, err := ReadBinaryDir(dir); err == nil || !strings.Contains(err.Error(), "dynamically linked") {
		t.Errorf("ReadBinaryDir(a dynamic binary) = %v, want it refused as dynamically linked", err)
	}
}

func isDynamicX86(path string) bool {
	f, err := elf.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return f.Machine == elf.EM_X86_64
		}
	}
	return false
}

// TestWorldWritableBinariesAreRefused is the audit's world-writable
// --agent-binaries dir, taken without a word: what it holds runs as root
// on every pool machine, so the dir, or a binary in it or given alone,
// that every user may write is refused, naming the path and the fix.
func TestWorldWritableBinariesAreRefused(t *testing.T) {
	newDir := func(t *testing.T, dirMode, binMode os.FileMode) (dir, bin string) {
		dir = t.TempDir()
		bin = fakeELF(t, filepath.Join(dir, "nodemgr-linux-amd64"), elf.EM_X86_64)
		if err := os.Chmod(bin, binMode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dir, dirMode); err != nil {
			t.Fatal(err)
		}
		return dir, bin
	}
	for _, tc := range []struct {
		name             string
		dirMode, binMode os.FileMode
		wantPath         func(dir, bin string) string // the path refused; nil: accepted
	}{
		{"world-writable dir", 0o777, 0o755, func(dir, _ string) string { return dir }},
		{"sticky world-writable dir", 0o1777, 0o755, func(dir, _ string) string { return dir }},
		{"world-writable binary", 0o755, 0o757, func(_, bin string) string { return bin }},
		{"group-writable dir", 0o775, 0o755, nil},
		{"private", 0o700, 0o700, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, bin := newDir(t, tc.dirMode, tc.binMode)
			_, err := ReadBinaryDir(dir)
			if tc.wantPath == nil {
				if err != nil {
					t.Errorf("ReadBinaryDir(%s) = %v, want it read", tc.name, err)
				}
				return
			}
			want := tc.wantPath(dir, bin)
			if err == nil || !strings.Contains(err.Error(), "writable by every user") || !strings.Contains(err.Error(), "chmod o-w "+want) {
				t.Errorf("ReadBinaryDir(%s) = %v, want it refused, naming chmod o-w %s", tc.name, err, want)
			}
		})
	}
	// A binary given alone (--agent-binary) is checked the same way.
	_, bin := newDir(t, 0o755, 0o777)
	if _, err := CheckBinary(bin); err == nil || !strings.Contains(err.Error(), "chmod o-w "+bin) {
		t.Errorf("CheckBinary(a world-writable binary) = %v, want it refused", err)
	}
}

// TestAgentConfigInsecureHTTP: a pool machine's agent may reach a plain
// http:// server beyond loopback only when the operator accepted it.
func TestAgentConfigInsecureHTTP(t *testing.T) {
	for _, insecure := range []bool{false, true} {
		o := &Orchestrator{cfg: Config{Bootstrap: BootstrapConfig{ServerURL: "http://10.0.0.5:7070", InsecureHTTP: insecure}}, cluster: &recordingCluster{}}
		got := string(o.agentConfig(api.PoolSpec{Name: "p"}, store.Deployment{ID: "d-1", Name: "m1"}, "nmj_x", false))
		if strings.Contains(got, "insecure_http: true") != insecure {
			t.Errorf("agentConfig with InsecureHTTP %v =\n%s\nwant insecure_http only when set", insecure, got)
		}
	}
}

// TestAgentConfigTaskUser: a machine reached as a user other than root
// runs code that names no user as that user; one reached as root, or as a
// bare uid, keeps the agent's own default.
func TestAgentConfigTaskUser(t *testing.T) {
	o := &Orchestrator{cfg: Config{Bootstrap: BootstrapConfig{ServerURL: "https://10.0.0.5:7070"}}, cluster: &recordingCluster{}}
	for _, tc := range []struct {
		login login
		want  string // "": none
	}{
		{login{user: "ubuntu", stage: "/tmp/x"}, "ubuntu"},
		{login{root: true, user: "root"}, ""},
		{login{stage: "/tmp/x"}, ""},
	} {
		b := tc.login.withTaskUser(o.agentConfig(api.PoolSpec{Name: "p"}, store.Deployment{ID: "d-1", Name: "m1"}, "nmj_x", false))
		var cfg map[string]any
		if err := yaml.Unmarshal(b, &cfg); err != nil {
			t.Fatalf("agent config for login %+v does not parse: %v\n%s", tc.login, err, b)
		}
		if got, _ := cfg["task_user"].(string); got != tc.want || cfg["server"] != "https://10.0.0.5:7070" {
			t.Errorf("agent config for login %+v =\n%s\nwant task_user %q and the rest kept", tc.login, b, tc.want)
		}
	}
}

// flakyLogin is an executor whose machine refuses connections for its
// first refusals calls, then fails with err (nil: runs the command).
type flakyLogin struct {
	refusals int
	err      error
	calls    int
}

func (f *flakyLogin) Name() string       { return "flaky" }
func (f *flakyLogin) Capability() string { return "exec:flaky" }
func (f *flakyLogin) Exec(_ context.Context, _ provision.Deployment, c execute.Command) (int, error) {
	f.calls++
	if f.calls <= f.refusals {
		return -1, errdefs.Class(errors.New("connect: connection refused"), errdefs.ErrUnavailable)
	}
	if f.err != nil {
		return -1, f.err
	}
	fmt.Fprintln(c.Stdout, "0 root\n4c4c4544") // the login probe's answer: root, and the machine's id
	return 0, nil
}
func (f *flakyLogin) CopyTo(context.Context, provision.Deployment, string, string) error { return nil }
func (f *flakyLogin) CopyFrom(context.Context, provision.Deployment, string, string) error {
	return nil
}

// Bootstrap waits for a machine whose SSH server does not answer yet (an
// EC2 instance for 10-60 s after it runs), within the bootstrap timeout,
// and gives up at once on a failure that waiting does not mend.
func TestAwaitLogin(t *testing.T) {
	ctx := context.Background()
	late := &flakyLogin{refusals: 3}
	if who, err := awaitLogin(ctx, late, store.Deployment{}, time.Minute, "", ""); err != nil || late.calls != 4 ||
		!who.root || who.machineID != "4c4c4544" {
		t.Errorf("a machine that answers on the 4th try: %+v, %v after %d tries; want root with its machine id after 4", who, err, late.calls)
	}
	never := &flakyLogin{refusals: 1 << 30}
	if _, err := awaitLogin(ctx, never, store.Deployment{}, 2*time.Second, "", ""); !errors.Is(err, errdefs.ErrUnavailable) || never.calls > 5 {
		t.Errorf("a machine that never answers: %v after %d tries; want unavailable after a few tries in the 2s given", err, never.calls)
	}
	refused := &flakyLogin{err: errdefs.Class(errors.New("host key mismatch"), errdefs.ErrPermission)}
	if _, err := awaitLogin(ctx, refused, store.Deployment{}, time.Minute, "", ""); !errors.Is(err, errdefs.ErrPermission) || refused.calls != 1 {
		t.Errorf("a refused login: %v after %d tries; want it at once", err, refused.calls)
	}
}

// The scripts run on machines parse as POSIX shell (dash, as Debian's
// /bin/sh): a syntax error would only show on a machine.
func TestMachineScriptsParse(t *testing.T) {
	key, _ := newHostKey()
	pull := pullBootstrap{serverURL: "http://s:1", token: "t", artifacts: []Artifact{{Arch: "x86_64", SHA256: "00"}}, hostKey: key, user: "u"}
	for name, script := range map[string]string{
		"agent log": agentLogScript, "start.sh": startScript(Artifact{Arch: "x86_64"}), "bootstrap.sh": pull.script(),
	} {
		if out, err := exec.Command("sh", "-n", "-c", script).CombinedOutput(); err != nil {
			t.Errorf("%s does not parse: %v: %s", name, err, out)
		}
	}
}
