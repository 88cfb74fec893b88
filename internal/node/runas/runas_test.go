package runas

import (
	"errors"
	"log/slog"
	"os"
	"runtime"
	"strings"
	"testing"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
)

// Resolve under the two kinds of agent: root, which runs code as others,
// and an unprivileged one, which can run code only as itself and says so
// rather than run it as someone else.
func TestResolve(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("users are looked up in /etc/passwd")
	}
	nobodyU, err := Lookup("nobody")
	if err != nil {
		t.Skipf("no nobody user here: %v", err)
	}
	rootU, err := Lookup("root")
	if err != nil {
		t.Fatal(err)
	}
	asRoot := Policy{Self: rootU, Switch: true, Default: nobodyU}
	asUser := Policy{Self: User{Name: "builder", UID: 1234, GID: 1234}, Default: User{Name: "builder", UID: 1234, GID: 1234}}
	tests := []struct {
		name    string
		p       Policy
		runAs   string
		wantUID uint32
		wantErr string // "" for none
	}{
		{"root agent, default", asRoot, "", nobodyU.UID, ""},
		{"root agent, a named user", asRoot, "nobody", nobodyU.UID, ""},
		{"root agent, a uid", asRoot, "65534", nobodyU.UID, ""},
		{"root agent, root", asRoot, "root", 0, ""},
		{"root agent, uid 0", asRoot, "0", 0, ""},
		{"root agent, agent", asRoot, "agent", 0, ""},
		{"root agent, a user it lacks", asRoot, "no-such-user-xyz", 0, "not a user on this node"},
		{"root agent, a bad name", asRoot, "a b", 0, "not a user name"},
		{"user agent, default", asUser, "", 1234, ""},
		{"user agent, agent", asUser, "agent", 1234, ""},
		{"user agent, root", asUser, "root", 0, "cannot start processes as \"root\""},
		{"user agent, another user", asUser, "nobody", 0, "run the agent as root"},
		{"user agent, its own name", asUser, "builder", 0, "the agent's own user"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			u, err := tc.p.Resolve("run_as", tc.runAs)
			if tc.wantErr != "" {
				var fe *errdefs.FieldError
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !errors.As(err, &fe) || fe.Field != "run_as" {
					t.Errorf("Resolve(%q) = %v, %v; want a field error on run_as saying %q", tc.runAs, u, err, tc.wantErr)
				}
				return
			}
			if err != nil || u.UID != tc.wantUID {
				t.Errorf("Resolve(%q) = %v, %v; want uid %d", tc.runAs, u, err, tc.wantUID)
			}
		})
	}
}

// A root agent refuses an alias of root or of itself by another name:
// only the privileged names, which the server grants to group admins,
// reach the agent's rights.
func TestResolveRefusesAliasesOfPrivilegedUsers(t *testing.T) {
	self := User{Name: "nobody", UID: 65534, GID: 65534}
	if u, err := Lookup("nobody"); err == nil {
		self = u
	}
	p := Policy{Self: self, Switch: true, Default: User{Name: "x", UID: 4242, GID: 4242}}
	if _, err := p.Resolve("run_as", self.Name); err == nil || !strings.Contains(err.Error(), "the agent's own user") {
		t.Errorf("Resolve(the agent's own name) = %v, want a refusal naming the agent's own user", err)
	}
}

// As root, NewPolicy makes the task user (or finds it) and runs code
// that names no user as it, never as root.
func TestNewPolicyAsRoot(t *testing.T) {
	if os.Geteuid() != 0 || runtime.GOOS != "linux" {
		t.Skip("needs root on Linux")
	}
	p, err := NewPolicy(slog.New(slog.DiscardHandler), "")
	if err != nil {
		t.Fatal(err)
	}
	if !p.Switch || p.Default.UID == 0 || !p.Other(p.Default) {
		t.Fatalf("policy = %+v; want a switching policy whose default is not root", p)
	}
	if u, err := Lookup(TaskUser); err == nil && u.UID != p.Default.UID {
		t.Errorf("default = %v, want %s (it exists: %v)", p.Default, TaskUser, u)
	}
	again, err := NewPolicy(slog.New(slog.DiscardHandler), "")
	if err != nil || again.Default.UID != p.Default.UID {
		t.Errorf("second NewPolicy = %+v, %v; want the same default user", again, err)
	}
}

// A configured task_user becomes the default only when it is an
// unprivileged user the agent can start code as; otherwise the error
// names the setting and what to do.
func TestConfiguredTaskUser(t *testing.T) {
	nobody, err := Lookup("nobody")
	if err != nil {
		t.Skip("no nobody user here")
	}
	root := Policy{Self: User{Name: "root"}, Switch: true}
	daemon := Policy{Self: User{Name: "svc", UID: 4242, GID: 4242}}
	for _, tc := range []struct {
		name   string
		p      Policy
		user   string
		want   uint32 // the default's uid, when ok
		refuse string // a part of the error, when not
	}{
		{"an unprivileged user", root, "nobody", nobody.UID, ""},
		{"by uid", root, "65534", nobody.UID, ""},
		{"root by name", root, "root", 0, "the agent's rights"},
		{"the agent alias", root, "agent", 0, "the agent's rights"},
		{"root by uid", root, "0", 0, "the agent's rights"},
		{"a missing user", root, "no-such-user-x", 0, "not a user on this machine"},
		{"a bad name", root, "a b", 0, "not a user name"},
		{"another user, agent not root", daemon, "nobody", 0, "not root, so it cannot start processes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u, err := tc.p.configured(tc.user)
			switch {
			case tc.refuse == "" && (err != nil || u.UID != tc.want):
				t.Errorf("configured(%q) = %v, %v; want uid %d", tc.user, u, err, tc.want)
			case tc.refuse != "" && (err == nil || !strings.Contains(err.Error(), tc.refuse) || !strings.Contains(err.Error(), "task_user")):
				t.Errorf("configured(%q) = %v, %v; want an error on task_user saying %q", tc.user, u, err, tc.refuse)
			}
		})
	}
}
