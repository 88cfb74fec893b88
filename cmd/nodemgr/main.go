// Command nodemgr is the one nodemgr binary: server, agent, dev and the
// client verbs. Everything lives in internal/cli.
package main

import (
	"os"

	"github.com/nodemgr/nodemgr/internal/cli"
)

func main() { os.Exit(cli.Main(os.Args[1:])) }
