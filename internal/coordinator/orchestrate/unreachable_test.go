package orchestrate

import "testing"

// A server on loopback is out of reach of a machine that does not share
// the host's network, as its provider's record says: local machines do,
// docker ones with network_mode host, the others never.
func TestUnreachableAsTheRecordSays(t *testing.T) {
	for _, tc := range []struct {
		url      string
		provider string
		extra    map[string]any
		reach    bool
	}{
		{"https://127.0.0.1:8443", "local", nil, true},
		{"https://localhost:8443", "docker", map[string]any{"network_mode": "host"}, true},
		{"https://127.0.0.1:8443", "docker", map[string]any{"network_mode": "bridge"}, false},
		{"https://127.0.0.1:8443", "docker", nil, false},
		{"https://[::1]:8443", "libvirt", nil, false},
		{"https://127.0.0.1:8443", "aws", map[string]any{"network_mode": "host"}, false},
		{"https://127.0.0.1:8443", "nosuch", nil, false},
		{"https://10.0.0.5:8443", "aws", nil, true},
	} {
		why := unreachable(tc.url, tc.provider, tc.extra)
		if (why == "") != tc.reach {
			t.Errorf("unreachable(%q, %q, %v) = %q, want reachable %v", tc.url, tc.provider, tc.extra, why, tc.reach)
		}
	}
}
