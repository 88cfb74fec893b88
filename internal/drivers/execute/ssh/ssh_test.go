package ssh_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	xssh "golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/drivers/execute"
	"github.com/nodemgr/nodemgr/internal/drivers/execute/executetest"
	"github.com/nodemgr/nodemgr/internal/drivers/execute/ssh"
	"github.com/nodemgr/nodemgr/internal/drivers/execute/ssh/sshtest"
	"github.com/nodemgr/nodemgr/internal/drivers/provision"
)

func TestMain(m *testing.M) { os.Exit(sshtest.Main(m)) }

// node returns an executor with settings (over the server's own) and a
// deployment of the test server.
func node(t testing.TB, settings map[string]string) (*ssh.SSH, provision.Deployment, *sshtest.Server) {
	t.Helper()
	return sshtest.Executor(t, ssh.New, settings, ssh.Capability)
}

func TestConformance(t *testing.T) {
	executetest.Run(t, func(t *testing.T) executetest.Target {
		e, d, srv := node(t, nil)
		return srv.Target(e, d)
	})
}

// exec runs argv and returns its exit code and stdout, failing t if it
// cannot run.
func run(t *testing.T, e execute.Executor, d provision.Deployment, argv ...string) (int, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	code, err := e.Exec(ctx, d, execute.Command{Argv: argv, Stdout: &stdout, Stderr: &stderr})
	if err != nil {
		t.Fatalf("Exec(%q) = %v (stderr %q)", argv, err, stderr.String())
	}
	return code, stdout.String()
}

// TestQuote checks that a POSIX shell splits Join's line back into the
// arguments given, here and on the machine.
func TestQuote(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string // Quote of args[0], when set
	}{
		{name: "plain", args: []string{"abc-1.2_x/y:z@h,+%"}, want: "abc-1.2_x/y:z@h,+%"},
		{name: "empty", args: []string{""}, want: "''"},
		{name: "space", args: []string{"a b"}, want: "'a b'"},
		{name: "single quote", args: []string{"it's"}, want: `'it'\''s'`},
		{name: "only quotes", args: []string{"''"}},
		{name: "double quote", args: []string{`say "hi"`}},
		{name: "dollar", args: []string{"$HOME ${PATH} $(id) $((1+1))"}},
		{name: "backtick", args: []string{"`id`"}},
		{name: "backslash", args: []string{`a\b\\c\`}},
		{name: "newlines", args: []string{"line1\nline2\n", "\n"}},
		{name: "tab and CR", args: []string{"a\tb\rc"}},
		{name: "glob", args: []string{"*", "?", "[a-z]", "{a,b}"}},
		{name: "tilde and hash", args: []string{"~", "~root", "#x", "a#b"}},
		{name: "operators", args: []string{";", "&&", "|", ">", "<", "&", "(", ")", "!"}},
		{name: "assignment", args: []string{"A=1", "=x"}},
		{name: "dash", args: []string{"-n", "--", "-e"}},
		{name: "unicode", args: []string{"héllo wörld ✓"}},
		{name: "several empty", args: []string{"", "", "x", ""}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.want != "" {
				if got := ssh.Quote(tc.args[0]); got != tc.want {
					t.Errorf("Quote(%q) = %s, want %s", tc.args[0], got, tc.want)
				}
			}
			line := "printf '%s\\0' " + ssh.Join(tc.args)
			out, err := exec.Command("/bin/sh", "-c", line).Output()
			if err != nil {
				t.Fatalf("sh -c %q: %v", line, err)
			}
			if got := strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00"); !equal(got, tc.args) {
				t.Errorf("sh split Join(%q) = %q", tc.args, got)
			}
		})
	}
	// And through the login shell and wrapper on the machine.
	e, d, _ := node(t, nil)
	var all []string
	for _, tc := range tests {
		all = append(all, tc.args...)
	}
	argv := append([]string{"sh", "-c", `printf '%s\0' "$@"`, "sh"}, all...)
	code, out := run(t, e, d, argv...)
	if got := strings.Split(strings.TrimSuffix(out, "\x00"), "\x00"); code != 0 || !equal(got, all) {
		t.Errorf("Exec(printf %q) = %d, %q", all, code, got)
	}
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestEnvAndDirQuoted checks that Env values and Dir are taken as they
// are, whatever they hold.
func TestEnvAndDirQuoted(t *testing.T) {
	e, d, _ := node(t, nil)
	_, dir := run(t, e, d, "mktemp", "-d")
	dir = strings.TrimSpace(dir)
	odd := dir + "/a dir 'with' $x and\nnewline"
	run(t, e, d, "mkdir", "-p", odd)
	t.Cleanup(func() { run(t, e, d, "rm", "-rf", dir) })
	var stdout bytes.Buffer
	val := "it's $HOME `id` \"q\"\nline2"
	code, err := e.Exec(context.Background(), d, execute.Command{Argv: []string{"sh", "-c", `printf '%s|%s' "$V" "$(pwd)"`},
		Env: []string{"V=" + val}, Dir: odd, Stdout: &stdout})
	if err != nil || code != 0 {
		t.Fatalf("Exec = %d, %v", code, err)
	}
	if want := val + "|" + odd; stdout.String() != want {
		t.Errorf("Exec printed %q, want %q", stdout.String(), want)
	}
	// PATH in Env is the one the program is looked up in.
	bin := dir + "/bin"
	run(t, e, d, "sh", "-c", `mkdir -p "$1" && printf '#!/bin/sh\necho found\n' > "$1/nodemgr-only-here" && chmod +x "$1/nodemgr-only-here"`, "sh", bin)
	stdout.Reset()
	code, err = e.Exec(context.Background(), d, execute.Command{Argv: []string{"nodemgr-only-here"}, Env: []string{"PATH=" + bin + ":/usr/bin:/bin"}, Stdout: &stdout})
	if err != nil || code != 0 || stdout.String() != "found\n" {
		t.Errorf("Exec with PATH set = %d, %v, %q; want 0, nil, found", code, err, stdout.String())
	}
}

// TestBackgroundOutput checks that output a background process holds
// open after the command exits is waited for briefly, not until it ends.
func TestBackgroundOutput(t *testing.T) {
	e, d, _ := node(t, nil)
	start := time.Now()
	code, out := run(t, e, d, "sh", "-c", "echo started; sleep 6 & echo done")
	if code != 0 || out != "started\ndone\n" {
		t.Errorf("Exec = %d, %q; want 0, started done", code, out)
	}
	if el := time.Since(start); el > 4*time.Second {
		t.Errorf("Exec returned after %v, want about 2s", el)
	}
}

func TestHostKeys(t *testing.T) {
	srv := sshtest.Shared(t)
	dir := t.TempDir()
	// A known_hosts line for the server's address with another key.
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	other, err := xssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	mismatch := filepath.Join(dir, "mismatch")
	line := knownhosts.Line([]string{knownhosts.Normalize(srv.Addr)}, other)
	if err := os.WriteFile(mismatch, []byte("# some comment\n"+line+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name       string
		knownHosts string
		acceptNew  bool
		want       []string // in the error
	}{
		{"mismatch", mismatch, false, []string{"does not match known_hosts " + mismatch + ":2", "ssh-keygen -R"}},
		{"mismatch even when accepting new keys", mismatch, true, []string{"does not match known_hosts " + mismatch + ":2"}},
		{"unknown host", empty, false, []string{"is not in known_hosts " + empty, "accept_new_host_keys"}},
		{"no known_hosts file", filepath.Join(dir, "none"), false, []string{"is not in known_hosts " + filepath.Join(dir, "none")}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e, d, _ := node(t, map[string]string{"known_hosts": tc.knownHosts, "accept_new_host_keys": strconv.FormatBool(tc.acceptNew)})
			code, err := e.Exec(context.Background(), d, execute.Command{Argv: []string{"true"}})
			if code != -1 || !errors.Is(err, errdefs.ErrPermission) {
				t.Fatalf("Exec = %d, %v; want -1 and permission denied", code, err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Exec error %q does not say %q", err, w)
				}
			}
		})
	}
}

// A deployment that pins its host key (a pool machine given the key in
// its user data) is checked against that key alone: it connects with no
// known_hosts entry and no trust on first use, and another key is refused
// even where known_hosts holds the right one.
func TestPinnedHostKey(t *testing.T) {
	srv := sshtest.Shared(t)
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	e, d, _ := node(t, map[string]string{"known_hosts": empty})
	d.Extra = map[string]any{provision.ExtraSSHHostKey: string(xssh.MarshalAuthorizedKey(srv.HostKey))}
	if code, err := e.Exec(context.Background(), d, execute.Command{Argv: []string{"true"}}); code != 0 || err != nil {
		t.Fatalf("Exec with the pinned key = %d, %v; want 0", code, err)
	}
	if b, _ := os.ReadFile(empty); len(b) != 0 {
		t.Errorf("known_hosts gained %q; a pinned key needs no entry", b)
	}

	pub, _, _ := ed25519.GenerateKey(rand.Reader)
	other, _ := xssh.NewPublicKey(pub)
	e2, d2, _ := node(t, nil) // known_hosts holds the server's real key
	d2.Extra = map[string]any{provision.ExtraSSHHostKey: string(xssh.MarshalAuthorizedKey(other))}
	code, err := e2.Exec(context.Background(), d2, execute.Command{Argv: []string{"true"}})
	if code != -1 || !errors.Is(err, errdefs.ErrPermission) || !strings.Contains(err.Error(), "not the one nodemgr made for this machine") {
		t.Errorf("Exec with another key pinned = %d, %v; want permission denied naming the pinned key", code, err)
	}
	d2.Extra[provision.ExtraSSHHostKey] = "not a key"
	if _, err := e2.Exec(context.Background(), d2, execute.Command{Argv: []string{"true"}}); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("Exec with a pinned key that is no key = %v; want a field error", err)
	}
}

// A destroyed machine's key learnt on first use is forgotten, plain or
// hashed as OpenSSH writes it, so the next machine at its address is
// trusted afresh; other hosts' lines, comments, and lines that name
// several hosts stay.
func TestForgetHost(t *testing.T) {
	srv := sshtest.Shared(t)
	kh := filepath.Join(t.TempDir(), "known_hosts")
	e, d, _ := node(t, map[string]string{"known_hosts": kh, "accept_new_host_keys": "true"})
	if code, _ := run(t, e, d, "true"); code != 0 {
		t.Fatalf("Exec(true) = %d", code)
	}
	learnt, _ := os.ReadFile(kh)
	host := knownhosts.Normalize(srv.Addr)
	hashed := knownhosts.Line([]string{knownhosts.HashHostname(host)}, srv.HostKey)
	others := "# mine\n" + srv.KnownHostsLine("10.9.9.9:22") + "\n" + knownhosts.Line([]string{host, "10.9.9.8"}, srv.HostKey) + "\n"
	if err := os.WriteFile(kh, []byte(others+string(learnt)+hashed+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := e.ForgetHost(d); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(kh); string(b) != others {
		t.Errorf("known_hosts after ForgetHost =\n%s\nwant only the other lines:\n%s", b, others)
	}
}

// TestForgetHostCloses checks that ForgetHost closes the kept connection
// to the machine: the next machine at its address is dialed afresh.
func TestForgetHostCloses(t *testing.T) {
	srv := sshtest.Shared(t)
	p := sshtest.NewProxy(t, srv.Addr)
	e, d, _ := node(t, map[string]string{"known_hosts": filepath.Join(t.TempDir(), "known_hosts"), "accept_new_host_keys": "true"})
	d.Address = p.Addr
	for range 2 {
		if code, _ := run(t, e, d, "true"); code != 0 {
			t.Fatalf("Exec(true) = %d", code)
		}
	}
	if n := p.Accepted(); n != 1 {
		t.Fatalf("two commands made %d connections, want 1", n)
	}
	if err := e.ForgetHost(d); err != nil {
		t.Fatal(err)
	}
	if code, _ := run(t, e, d, "true"); code != 0 {
		t.Fatalf("Exec(true) after ForgetHost = %d", code)
	}
	if n := p.Accepted(); n != 2 {
		t.Errorf("after ForgetHost: %d connections in all, want 2", n)
	}
}

// TestTrustOnFirstUse checks that accept_new_host_keys adds an unknown
// host's key to known_hosts, which then serves without the setting.
func TestTrustOnFirstUse(t *testing.T) {
	srv := sshtest.Shared(t)
	kh := filepath.Join(t.TempDir(), "new", "known_hosts")
	e, d, _ := node(t, map[string]string{"known_hosts": kh, "accept_new_host_keys": "true"})
	if code, _ := run(t, e, d, "true"); code != 0 {
		t.Fatalf("Exec(true) = %d", code)
	}
	b, err := os.ReadFile(kh)
	if err != nil {
		t.Fatalf("known_hosts after the first connection: %v", err)
	}
	if want := srv.KnownHostsLine(srv.Addr) + "\n"; string(b) != want {
		t.Errorf("known_hosts = %q, want %q", b, want)
	}
	e2, d2, _ := node(t, map[string]string{"known_hosts": kh})
	if code, _ := run(t, e2, d2, "true"); code != 0 {
		t.Fatalf("Exec(true) with the key learnt = %d", code)
	}
	if b2, _ := os.ReadFile(kh); !bytes.Equal(b, b2) {
		t.Errorf("known_hosts changed on the second connection: %q", b2)
	}
}

// TestJumpHost connects to the server through itself.
func TestJumpHost(t *testing.T) {
	srv := sshtest.Shared(t)
	p := sshtest.NewProxy(t, srv.Addr)
	// The target is reached at its own address from the jump host.
	kh := srv.KnownHostsFile(t, srv.Addr, p.Addr)
	tests := []struct {
		name     string
		settings map[string]string
		extra    map[string]any
		viaProxy bool
	}{
		{"setting", map[string]string{"jump_host": srv.User + "@" + p.Addr}, nil, true},
		{"extra", nil, map[string]any{"ssh_jump_host": p.Addr}, true},
		{"itself", map[string]string{"jump_host": srv.Addr}, nil, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := p.Accepted()
			s := map[string]string{"known_hosts": kh}
			for k, v := range tc.settings {
				s[k] = v
			}
			e, d, _ := node(t, s)
			d.Extra = tc.extra
			if code, out := run(t, e, d, "echo", "through"); code != 0 || out != "through\n" {
				t.Errorf("Exec through %s = %d, %q", p.Addr, code, out)
			}
			if n, want := p.Accepted()-before, map[bool]int64{true: 1}[tc.viaProxy]; n != want {
				t.Errorf("the proxy took %d connections, want %d", n, want)
			}
		})
	}
}

// TestExtraWins checks that the deployment's Extra wins over the settings.
func TestExtraWins(t *testing.T) {
	srv := sshtest.Shared(t)
	host, port, _ := net.SplitHostPort(srv.Addr)
	missing := filepath.Join(t.TempDir(), "missing")
	if _, err := ssh.New(map[string]string{"identity_file": missing}); !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), missing) {
		t.Errorf("ssh.New(identity_file %s) = %v, want invalid naming it", missing, err)
	}
	e, d, _ := node(t, map[string]string{"port": "1", "user": "nobody-at-all"})
	d.Address = host
	d.Extra = map[string]any{"ssh_port": port, "ssh_user": srv.User, "ssh_identity_file": srv.Identity}
	if code, _ := run(t, e, d, "true"); code != 0 {
		t.Errorf("Exec(true) = %d", code)
	}
	d.Extra["ssh_port"] = float64(mustAtoi(t, port)) // as JSON has it
	if code, _ := run(t, e, d, "true"); code != 0 {
		t.Errorf("Exec(true) with a numeric port = %d", code)
	}
}

func mustAtoi(t *testing.T, s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestConnectionReuse checks that many commands, one after another and
// at once, share one TCP connection, and that a broken one is replaced.
func TestConnectionReuse(t *testing.T) {
	srv := sshtest.Shared(t)
	p := sshtest.NewProxy(t, srv.Addr)
	kh := srv.KnownHostsFile(t, p.Addr)
	e, d, _ := node(t, map[string]string{"known_hosts": kh})
	d.Address = p.Addr
	for i := range 20 {
		if code, out := run(t, e, d, "echo", strconv.Itoa(i)); code != 0 || out != strconv.Itoa(i)+"\n" {
			t.Fatalf("Exec(echo %d) = %d, %q", i, code, out)
		}
	}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			if code, out := run(t, e, d, "sh", "-c", "sleep 0.2; echo $0", strconv.Itoa(i)); code != 0 || out != strconv.Itoa(i)+"\n" {
				t.Errorf("Exec(echo %d) at once = %d, %q", i, code, out)
			}
		})
	}
	wg.Wait()
	if n := p.Accepted(); n != 1 {
		t.Errorf("28 commands made %d connections, want 1", n)
	}
	// More at once than one connection carries: a second one.
	for i := range 12 {
		wg.Go(func() {
			if code, _ := run(t, e, d, "sleep", "0.5"); code != 0 {
				t.Errorf("Exec(sleep) %d = %d", i, code)
			}
		})
	}
	wg.Wait()
	if n := p.Accepted(); n != 2 {
		t.Errorf("after 12 commands at once: %d connections, want 2", n)
	}
	p.Break()
	if code, _ := run(t, e, d, "true"); code != 0 {
		t.Errorf("Exec(true) after the connections broke = %d", code)
	}
	if n := p.Accepted(); n != 3 {
		t.Errorf("after the connections broke: %d connections in all, want 3", n)
	}
}

// TestCutOffPrompt checks that a command cut off reports the cut, and
// that nothing is written to its streams after Exec returns.
func TestCutOffPrompt(t *testing.T) {
	e, d, _ := node(t, nil)
	var out bytes.Buffer
	start := time.Now()
	code, err := e.Exec(context.Background(), d, execute.Command{Argv: []string{"sh", "-c", "while :; do echo x; sleep 0.01; done"}, Stdout: &out, Timeout: 500 * time.Millisecond})
	if code != -1 || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Exec = %d, %v; want -1, deadline exceeded", code, err)
	}
	if el := time.Since(start); el > 4*time.Second {
		t.Errorf("Exec returned after %v", el)
	}
	n := out.Len()
	time.Sleep(200 * time.Millisecond)
	if out.Len() != n || n == 0 {
		t.Errorf("stdout had %d bytes at the cut-off, %d after", n, out.Len())
	}
}

// TestOpenPrivateKeyIsRefused is the audit's 0644 private key, accepted
// silently: like ssh, the executor refuses a key that users other than its
// owner may read or write, naming the file and the fix, both as a setting
// and as a deployment's ssh_identity_file; 0600 and 0400 log in.
func TestOpenPrivateKeyIsRefused(t *testing.T) {
	srv := sshtest.Shared(t)
	key, err := os.ReadFile(srv.Identity)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		mode    os.FileMode
		refused bool
	}{
		{0o644, true},
		{0o640, true},
		{0o604, true},
		{0o620, true},
		{0o600, false},
		{0o400, false},
	} {
		t.Run(tc.mode.String(), func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "id_ed25519")
			if err := os.WriteFile(file, key, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(file, tc.mode); err != nil {
				t.Fatal(err)
			}
			checkRefusal := func(what string, err error) {
				t.Helper()
				if !tc.refused {
					if err != nil {
						t.Errorf("%s with a key of mode %s = %v, want it to log in", what, tc.mode, err)
					}
					return
				}
				if !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), file) || !strings.Contains(err.Error(), "chmod 600 "+file) {
					t.Errorf("%s with a key of mode %s = %v, want it refused, naming %s and chmod 600", what, tc.mode, err, file)
				}
			}
			settings := srv.Settings()
			settings["identity_file"] = file
			e, err := ssh.New(settings)
			checkRefusal("ssh.New", err)
			if err == nil {
				e.Close()
			}

			// A deployment's own key is read when it connects.
			e, d, _ := node(t, nil)
			d.Extra = map[string]any{"ssh_identity_file": file}
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			code, err := e.Exec(ctx, d, execute.Command{Argv: []string{"true"}})
			checkRefusal("Exec", err)
			if err == nil && code != 0 {
				t.Errorf("Exec(true) with a key of mode %s = %d", tc.mode, code)
			}
		})
	}
}

// TestOpenDefaultKeyIsRefused: with no key named, ~/.ssh/id_ed25519 open to
// others is refused out loud, not skipped (the login would then fail
// without a word on why).
func TestOpenDefaultKeyIsRefused(t *testing.T) {
	srv := sshtest.Shared(t)
	key, err := os.ReadFile(srv.Identity)
	if err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	file := filepath.Join(home, ".ssh", "id_ed25519")
	if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, key, 0o600); err != nil {
		t.Fatal(err)
	}
	os.Chmod(file, 0o644)
	t.Setenv("HOME", home)
	t.Setenv("SSH_AUTH_SOCK", "")
	settings := srv.Settings()
	delete(settings, "identity_file")
	e, err := ssh.New(settings)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	_, err = e.Exec(ctx, srv.Deployment("node", ssh.Capability), execute.Command{Argv: []string{"true"}})
	if !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), "chmod 600 "+file) {
		t.Errorf("Exec with the default key at mode 0644 = %v, want it refused, naming chmod 600 %s", err, file)
	}
	os.Chmod(file, 0o600)
	if code, err := e.Exec(ctx, srv.Deployment("node", ssh.Capability), execute.Command{Argv: []string{"true"}}); err != nil || code != 0 {
		t.Errorf("Exec with the default key at mode 0600 = %d, %v; want it to log in", code, err)
	}
}
