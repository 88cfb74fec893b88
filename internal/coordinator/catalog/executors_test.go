package catalog

import (
	"errors"
	"strings"
	"testing"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	_ "github.com/nodemgr/nodemgr/internal/drivers/all"
)

// The lists the exec messages give come from the executor registry, in
// its order, and read as they did when the server named the executors.
func TestExecMessagesListTheRegistry(t *testing.T) {
	if got, want := capabilities(), "exec:local, exec:docker, exec:ssh, copy:sftp or copy:rsync"; got != want {
		t.Errorf("capabilities() = %q, want %q", got, want)
	}
	if got, want := settingsTakers(), "ssh does: user, port, identity_file, known_hosts, accept_new_host_keys, jump_host, connect_timeout"; got != want {
		t.Errorf("settingsTakers() = %q, want %q", got, want)
	}
	for _, tc := range []struct {
		settings map[string]map[string]string
		want     string
	}{
		{map[string]map[string]string{"docker": {"host": "x"}}, `executor_settings.docker: no executor "docker" takes settings (ssh does: user, port, identity_file, known_hosts, accept_new_host_keys, jump_host, connect_timeout)`},
		{map[string]map[string]string{"sftp": {"user": "x"}}, "executor_settings.sftp: the sftp executor takes the ssh executor's settings; set them under ssh"},
		{map[string]map[string]string{"sftp": {}, "rsync": nil}, ""},
	} {
		err := CheckExecutorSettings(tc.settings)
		got := ""
		if err != nil {
			got = err.Error()
		}
		if got != tc.want {
			t.Errorf("CheckExecutorSettings(%v) = %q, want %q", tc.settings, got, tc.want)
		}
	}
}

func TestExecPickExecutor(t *testing.T) {
	ssh := []string{"exec:ssh", "copy:sftp", "copy:rsync"}
	tests := []struct {
		name  string
		caps  []string
		via   string
		copy  bool
		want  string
		class error
		says  string
	}{
		{name: "command: first exec", caps: ssh, want: "ssh"},
		{name: "copy: first copy", caps: ssh, copy: true, want: "sftp"},
		{name: "copy: the deployment's order", caps: []string{"copy:rsync", "exec:ssh", "copy:sftp"}, copy: true, want: "rsync"},
		{name: "command: exec after copies", caps: []string{"copy:rsync", "exec:ssh"}, want: "ssh"},
		{name: "copy: no copy capability", caps: []string{"exec:docker"}, copy: true, want: "docker"},
		{name: "command: no exec capability", caps: []string{"copy:sftp"}, want: "sftp"},
		{name: "unknown capabilities skipped", caps: []string{"exec:elsewhere", "exec:local"}, want: "local"},
		{name: "via", caps: ssh, via: "rsync", want: "rsync"},
		{name: "via for a command", caps: ssh, via: "sftp", want: "sftp"},
		{name: "via not offered", caps: ssh, via: "docker", class: errdefs.ErrInvalid,
			says: "does not offer the docker executor (exec:docker); it offers ssh (exec:ssh), sftp (copy:sftp), rsync (copy:rsync)"},
		{name: "via unknown", caps: ssh, via: "scp", class: errdefs.ErrInvalid, says: `no executor "scp"; nodemgr has local, docker, ssh, sftp, rsync`},
		{name: "none", caps: []string{"exec:elsewhere"}, class: errdefs.ErrNotFound},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := pickExecutor("m", tc.caps, tc.via, tc.copy)
			if tc.class != nil {
				if !errors.Is(err, tc.class) || !strings.Contains(errString(err), tc.says) {
					t.Errorf("pickExecutor(%v, via %q, copy %v) = %q, %v; want %v saying %q", tc.caps, tc.via, tc.copy, got, err, tc.class, tc.says)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("pickExecutor(%v, via %q, copy %v) = %q, %v; want %q", tc.caps, tc.via, tc.copy, got, err, tc.want)
			}
		})
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// TestExecCopyVia runs commands and copies through the API on a machine
// reached over SSH (a real sshd), with each executor it offers, and
// checks that one it does not offer is refused.
func TestExecutorSettingsChecked(t *testing.T) {
	for _, tc := range []struct {
		settings map[string]map[string]string
		says     string
	}{
		{map[string]map[string]string{"ssh": {"colour": "blue"}}, "unknown ssh executor setting"},
		{map[string]map[string]string{"ssh": {"port": "0"}}, "port"},
		{map[string]map[string]string{"rsync": {"user": "x"}}, "set them under ssh"},
		{map[string]map[string]string{"telnet": {"user": "x"}}, `no executor "telnet" takes settings`},
	} {
		if err := CheckExecutorSettings(tc.settings); !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("CheckExecutorSettings(%v) = %v, want invalid saying %q", tc.settings, err, tc.says)
		}
	}
}
