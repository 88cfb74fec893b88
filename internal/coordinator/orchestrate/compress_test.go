package orchestrate

import "testing"

// capOnly is an executor that says its capability and does nothing else.
type capOnly struct {
	flakyLogin
	capability string
}

func (c *capOnly) Capability() string { return c.capability }

// The agent is compressed on its way to a machine unless the executor's
// record says the machine is on the server's host (docker, local); an
// executor without a record is taken to cross a network.
func TestCompressFor(t *testing.T) {
	for _, tc := range []struct {
		capability string
		want       bool
	}{
		{"exec:local", false},
		{"exec:docker", false},
		{"exec:ssh", true},
		{"copy:sftp", true},
		{"exec:flaky", true},
	} {
		if got := compressFor(&capOnly{capability: tc.capability}); got != tc.want {
			t.Errorf("compressFor(%s) = %v, want %v", tc.capability, got, tc.want)
		}
	}
}
