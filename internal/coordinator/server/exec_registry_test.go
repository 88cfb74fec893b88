package server

import (
	"testing"
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
		err := checkExecutorSettings(tc.settings)
		got := ""
		if err != nil {
			got = err.Error()
		}
		if got != tc.want {
			t.Errorf("checkExecutorSettings(%v) = %q, want %q", tc.settings, got, tc.want)
		}
	}
}
