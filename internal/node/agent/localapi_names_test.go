package agent

import (
	"testing"

	"github.com/nodemgr/nodemgr/api"
)

// TestWithNamesServer: a service is told where the overlay's names are
// answered, unless its spec says otherwise or there is no such server;
// the caller's env is not changed.
func TestWithNamesServer(t *testing.T) {
	own := map[string]string{"A": "1"}
	for _, tc := range []struct {
		name, dns string
		env       map[string]string
		want      string
	}{
		{"overlay", "100.64.3.1:53", own, "100.64.3.1:53"},
		{"no names server", "", own, ""},
		{"the spec's own", "100.64.3.1:53", map[string]string{"NODEMGR_DNS": "10.0.0.53:53"}, "10.0.0.53:53"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := withNamesServer(api.ServiceSpec{Env: tc.env}, tc.dns)
			if got.Env["NODEMGR_DNS"] != tc.want {
				t.Errorf("withNamesServer(%v, %q) NODEMGR_DNS = %q, want %q", tc.env, tc.dns, got.Env["NODEMGR_DNS"], tc.want)
			}
		})
	}
	if _, set := own["NODEMGR_DNS"]; set {
		t.Error("withNamesServer changed the caller's env")
	}
}
