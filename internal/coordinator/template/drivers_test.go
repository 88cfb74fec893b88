package template

import "github.com/nodemgr/nodemgr/internal/drivers/provision/provisiontest"

// Templates render for the registered providers; these tests see the
// rendering rules, not the drivers' key lists.
func init() { provisiontest.RegisterStandIns("local", "docker", "libvirt", "aws") }
