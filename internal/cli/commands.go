//go:build !agentonly && !clientonly

package cli

import (
	"os"

	"github.com/spf13/cobra"

	"github.com/nodemgr/nodemgr/internal/drivers/execute/rsync"
)

// agentOnly is false: this is the whole nodemgr. Built with -tags
// agentonly it is the agent alone (commands_agentonly.go).
// clientOnly: built with -tags clientonly (commands_clientonly.go).
const clientOnly = false

const agentOnly = false

// addCommands adds nodemgr's commands to root.
func addCommands(root *cobra.Command, e *env) {
	root.AddCommand(
		newServerCmd(e), newAgentCmd(e), newDevCmd(e), newWorkerCmd(e),
		newNodeCmd(e), newSuiteCmd(e), newTaskCmd(e), newCacheCmd(e), newTemplateCmd(e), newMappingCmd(e), newProvisionCmd(e), newDeploymentCmd(e), newLifecycleCmd(e), newPoolCmd(e), newScheduleCmd(e), newExecCmd(e), newCpCmd(e), newArtifactCmd(e), newServiceCmd(e), newContainerCmd(e), newEnsembleCmd(e), newAllocationCmd(e), newTokenCmd(e), newJoinTokenCmd(e), newUserCmd(e),
		newWhoamiCmd(e), newNetworkCmd(e), newBenchCmd(e), newMigrateStoreCmd(e), newBackupStoreCmd(e),
	)
}

const rootLong = `nodemgr gives a team compute nodes and runs work on them through one agent
per machine. A coordinator server holds the state; agents hold one WebSocket
to it.

Start here:
  nodemgr dev                      server + agent in one process, on ./nodemgr-dev
  nodemgr server                   the coordinator
  nodemgr agent --server URL       an agent (register once, --join-token-file FILE)
  nodemgr node ls                  what the server knows

` + clientHelp + `
Shell completion: nodemgr completion bash | zsh | fish (the Debian package
installs it)`

// relayed runs nodemgr as rsync's remote shell when args say so (the rsync
// executor starts it so): its arguments are rsync's, not flags of ours.
func relayed(args []string) (code int, ok bool) {
	if len(args) > 0 && args[0] == rsync.RelayCommand {
		return rsync.RelayMain(args[1:], os.Stdin, os.Stdout, os.Stderr), true
	}
	return 0, false
}
