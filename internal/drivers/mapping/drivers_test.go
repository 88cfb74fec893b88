package mapping

import (
	"errors"

	"github.com/nodemgr/nodemgr/internal/drivers/provision"
)

// Stand-ins for the providers, so that these tests see rules, not the
// drivers' key lists: only docker lists its keys (see
// TestOverrideKeysAreTheProvidersOwn); the others' blocks are open.
func init() {
	none := func(map[string]string) (provision.Provider, error) {
		return nil, errors.New("a stand-in makes no provider")
	}
	for i, name := range []string{"local", "docker", "libvirt", "aws"} {
		d := provision.Driver{Name: name, Order: i, New: none}
		if name == "docker" {
			d.ExtraKeys = []string{"network_mode", "env"}
		}
		provision.Register(d)
	}
}
