//go:build agentonly

package cli

import "github.com/spf13/cobra"

// agentOnly is true: built with -tags agentonly, nodemgr is the agent and
// the workers it starts, nothing more. Go initializes every package a
// binary links, used or not, and touches their code, tables and type
// descriptors as it does; an agent linked with the server, its stores,
// the cloud SDKs and the dashboard held 34 MB idle where this one holds
// under 20 (nodemgr bench rss). Pool machines can be given this build.
// clientOnly: built with -tags clientonly (commands_clientonly.go).
const clientOnly = false

const agentOnly = true

// relayed: the agent-only build is never rsync's remote shell (the
// server's rsync executor starts a full nodemgr).
func relayed([]string) (int, bool) { return 0, false }

// addCompletions has nothing to add: the agent-only build completes no
// names of the server's.
func addCompletions(*cobra.Command, *env) {}

// addCommands adds the agent-only build's commands to root.
func addCommands(root *cobra.Command, e *env) {
	root.AddCommand(newAgentCmd(e), newWorkerCmd(e))
}

const rootLong = `nodemgr, agent-only build (-tags agentonly): the node agent and the workers
it starts, without the server, dev, bench or the client commands. It is
smaller and holds less memory; manage the node with a full nodemgr.

  nodemgr agent --server URL       an agent (register once, --join-token-file FILE)

Exit codes: 0 done; 1 the operation failed; 2 the command line is wrong (usage).`
