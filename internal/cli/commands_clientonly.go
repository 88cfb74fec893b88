//go:build clientonly

package cli

import "github.com/spf13/cobra"

// agentOnly is false: the client build is not the agent.
// clientOnly: built with -tags clientonly (commands_clientonly.go).
const clientOnly = true

const agentOnly = false

// relayed: the client build is never rsync's remote shell (the server's
// rsync executor starts a full nodemgr).
func relayed([]string) (int, bool) { return 0, false }

// addCommands adds the client build's commands to root: those that talk
// to a server, and template checks. Go initializes every package a binary
// links, used or not; without the server, the agent, the stores, the
// drivers' code and the cloud SDKs, a command line starts in about a
// quarter of the time (nodemgr exec: the CLI's start was most of it).
func addCommands(root *cobra.Command, e *env) {
	root.AddCommand(
		newNodeCmd(e), newSuiteCmd(e), newTaskCmd(e), newCacheCmd(e), newTemplateCmd(e), newMappingCmd(e), newProvisionCmd(e), newDeploymentCmd(e), newLifecycleCmd(e), newPoolCmd(e), newScheduleCmd(e), newExecCmd(e), newCpCmd(e), newArtifactCmd(e), newServiceCmd(e), newContainerCmd(e), newEnsembleCmd(e), newAllocationCmd(e), newTokenCmd(e), newJoinTokenCmd(e), newUserCmd(e),
		newWhoamiCmd(e), newNetworkCmd(e),
	)
}

const rootLong = `nodemgr, client build (-tags clientonly): the commands that talk to a
nodemgr server, without the server, the agent, dev or bench. It starts
faster and is smaller; run those with a full nodemgr.

` + clientHelp + `
Shell completion: nodemgr completion bash | zsh | fish`
