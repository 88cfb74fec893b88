// Package all links in every provider and executor nodemgr has, so that
// their registration records are in the provision and execute registries.
// Programs import it once, at the top (internal/cli); a test that needs one
// driver may import just that one.
package all

import (
	_ "github.com/nodemgr/nodemgr/internal/drivers/execute/dockerexec"
	_ "github.com/nodemgr/nodemgr/internal/drivers/execute/local"
	_ "github.com/nodemgr/nodemgr/internal/drivers/execute/rsync"
	_ "github.com/nodemgr/nodemgr/internal/drivers/execute/sftp"
	_ "github.com/nodemgr/nodemgr/internal/drivers/execute/ssh"
	_ "github.com/nodemgr/nodemgr/internal/drivers/provision/aws"
	_ "github.com/nodemgr/nodemgr/internal/drivers/provision/docker"
	_ "github.com/nodemgr/nodemgr/internal/drivers/provision/libvirt"
	_ "github.com/nodemgr/nodemgr/internal/drivers/provision/local"
)
