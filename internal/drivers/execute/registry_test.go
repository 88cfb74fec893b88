package execute_test

import (
	"errors"
	"io"
	"slices"
	"testing"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	_ "github.com/nodemgr/nodemgr/internal/drivers/all"
	"github.com/nodemgr/nodemgr/internal/drivers/execute"
)

// An unknown executor is refused for the field it came from, with the
// executors nodemgr has, in the order people read them.
func TestLookupUnknown(t *testing.T) {
	for _, tc := range []struct{ field, name string }{
		{"via", "scp"},
		{"executor_settings.winrm", "winrm"},
		{"via", "SSH"},
	} {
		t.Run(tc.field+"="+tc.name, func(t *testing.T) {
			_, err := execute.Lookup(tc.field, tc.name)
			var fe *errdefs.FieldError
			if !errors.As(err, &fe) || fe.Field != tc.field || !errors.Is(err, errdefs.ErrInvalid) {
				t.Fatalf("Lookup(%q, %q) = %v, want an invalid-field error on %s", tc.field, tc.name, err, tc.field)
			}
			if want := `no executor "` + tc.name + `"; nodemgr has local, docker, ssh, sftp, rsync`; fe.Reason != want {
				t.Errorf("Lookup(%q, %q) says %q, want %q", tc.field, tc.name, fe.Reason, want)
			}
		})
	}
	if d, ok := execute.ByCapability("exec:winrm"); ok {
		t.Errorf(`ByCapability("exec:winrm") = %+v, want none`, d)
	}
}

// Every executor linked in has a whole record, and what its New makes
// answers to the record's name and capability. Nothing here contacts a
// machine: New must not.
func TestEveryDriverHasItsRecord(t *testing.T) {
	names := execute.Names()
	if want := []string{"local", "docker", "ssh", "sftp", "rsync"}; !slices.Equal(names, want) {
		t.Fatalf("Names() = %v, want %v", names, want)
	}
	made := map[string]execute.Executor{}
	env := execute.Env{}
	env.Executor = func(name string) (execute.Executor, error) {
		if e := made[name]; e != nil {
			return e, nil
		}
		d, err := execute.Lookup("executor", name)
		if err != nil {
			return nil, err
		}
		e, err := d.New(env)
		if err != nil {
			return nil, err
		}
		made[name] = e
		return e, nil
	}
	t.Cleanup(func() {
		for _, e := range made {
			if c, ok := e.(io.Closer); ok {
				c.Close()
			}
		}
	})
	orders := map[int]string{}
	for _, d := range execute.Drivers() {
		if d.Name == "" || d.Capability == "" || d.New == nil {
			t.Errorf("%+v: a record needs Name, Capability and New", d)
			continue
		}
		if other, dup := orders[d.Order]; dup || d.Order <= 0 {
			t.Errorf("%s: Order %d is not its own place in lists (%s has it)", d.Name, d.Order, other)
		}
		orders[d.Order] = d.Name
		if byCap, ok := execute.ByCapability(d.Capability); !ok || byCap.Name != d.Name {
			t.Errorf("ByCapability(%q) = %q, %v, want %s", d.Capability, byCap.Name, ok, d.Name)
		}
		if d.SettingsOf != "" {
			if o, err := execute.Lookup("settings_of", d.SettingsOf); err != nil || len(o.Settings) == 0 {
				t.Errorf("%s takes the settings of %s, which takes none (%v)", d.Name, d.SettingsOf, err)
			}
		}
		e, err := env.Executor(d.Name)
		if err != nil {
			t.Errorf("%s: New = %v", d.Name, err)
			continue
		}
		if e.Name() != d.Name || e.Capability() != d.Capability {
			t.Errorf("%s: New made %s (%s), want %s (%s)", d.Name, e.Name(), e.Capability(), d.Name, d.Capability)
		}
	}
}

// The executors that go over ssh share its connections: what they are
// made with is the ssh executor the server made, not one of their own.
func TestSharedSSH(t *testing.T) {
	asked := map[string]int{}
	env := execute.Env{Executor: func(name string) (execute.Executor, error) {
		asked[name]++
		d, err := execute.Lookup("executor", name)
		if err != nil {
			return nil, err
		}
		return d.New(execute.Env{})
	}}
	for _, name := range []string{"sftp", "rsync"} {
		d, _ := execute.Lookup("executor", name)
		e, err := d.New(env)
		if err != nil {
			t.Fatalf("%s: New = %v", name, err)
		}
		if c, ok := e.(io.Closer); ok {
			c.Close()
		}
	}
	if asked["ssh"] != 2 || len(asked) != 1 {
		t.Errorf("sftp and rsync asked for %v, want ssh twice", asked)
	}
}
