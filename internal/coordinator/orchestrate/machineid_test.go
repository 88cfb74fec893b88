package orchestrate

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/nodemgr/nodemgr/internal/base/hw"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
	"github.com/nodemgr/nodemgr/internal/drivers/execute/local"
)

// TestReadMachineID runs the machine id probe through the local executor
// over files laid out as a machine's: it answers the id the agent will
// register with (hw.MachineIDFrom over the same files, after the probe),
// and gives a machine that has none one, in the agent's data dir.
func TestReadMachineID(t *testing.T) {
	given := regexp.MustCompile(`^[0-9a-f]{32}$`)
	tests := []struct {
		name             string
		etc, dbus, agent *string // contents; nil: no such file
		want             string  // "": a given id
	}{
		{name: "systemd's", etc: ptr("4c4c4544004a\n"), dbus: ptr("other\n"), want: "4c4c4544004a"},
		{name: "D-Bus's while systemd's is uninitialized", etc: ptr("uninitialized\n"), dbus: ptr("d8a5\n"), want: "d8a5"},
		{name: "the agent's own", agent: ptr("9f00aa\n"), want: "9f00aa"},
		{name: "the OS's over the agent's", etc: ptr("e7c1"), agent: ptr("9f00aa\n"), want: "e7c1"},
		{name: "none: one is given", want: ""},
		{name: "blank files: one is given", etc: ptr(" \n"), agent: ptr(""), want: ""},
	}
	ex := local.New()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			etc, dbus := filepath.Join(root, "etc-machine-id"), filepath.Join(root, "dbus-machine-id")
			data := filepath.Join(root, "var", "lib", "nodemgr")
			write := func(path string, content *string) {
				if content == nil {
					return
				}
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, []byte(*content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			write(etc, tc.etc)
			write(dbus, tc.dbus)
			write(filepath.Join(data, hw.MachineIDFile), tc.agent)

			d := store.Deployment{ID: "d1", Provider: "local", Name: "m1", Executors: []string{local.Capability}}
			script := machineIDScript([]string{etc, dbus}, data)
			got, err := readMachineID(t.Context(), ex, d, script, newMachineID())
			if err != nil {
				t.Fatalf("readMachineID() = %v", err)
			}
			// A root login reads it in the login's own round trip.
			if os.Geteuid() == 0 {
				who, err := checkLogin(t.Context(), ex, d, script, newMachineID())
				if err != nil || !who.root || who.machineID != got {
					t.Errorf("checkLogin() as root = %+v, %v; want root with machine id %q", who, err, got)
				}
			}
			if tc.want != "" && got != tc.want || tc.want == "" && !given.MatchString(got) {
				t.Errorf("readMachineID() = %q, want %q (\"\": 32 hex digits)", got, tc.want)
			}
			agent, err := hw.MachineIDFrom(data, []string{etc, dbus})
			if err != nil || agent != got {
				t.Errorf("the agent's machine id = %q, %v; the orchestrator read %q", agent, err, got)
			}
			if tc.want == "" {
				st, err := os.Stat(filepath.Join(data, hw.MachineIDFile))
				if err != nil || st.Mode().Perm() != 0o600 {
					t.Errorf("the given id's file: %v, %v; want mode 0600", st, err)
				}
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }
