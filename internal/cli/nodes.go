package cli

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/client"
	"github.com/nodemgr/nodemgr/internal/base/validate"
)

func newNodeCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{Use: "node", Short: "List, inspect and control nodes"}
	cmd.AddCommand(nodeLsCmd(e), nodeShowCmd(e), nodeShutdownCmd(e), nodeTagCmd(e), nodeLabelCmd(e), nodeRmCmd(e))
	for _, sub := range []*cobra.Command{nodeResourcesCmd(e), nodeOnboardCmd(e), nodeOffboardCmd(e), nodeCommitCmd(e), nodeReleaseCmd(e)} {
		workloadFlags(sub)
		cmd.AddCommand(sub)
	}
	return cmd
}

func nodeLsCmd(e *env) *cobra.Command {
	var status string
	cmd := &cobra.Command{Use: "ls", Short: "List nodes", Args: cobra.NoArgs}
	cmd.Flags().StringVar(&status, "status", "", "only nodes with this status: online, suspect, offline (any case)")
	return lsCmd(e, cmd, "all",
		func(c *client.Client, ctx context.Context, p client.Page) (api.NodeList, error) {
			return c.NodesPage(ctx, status, p)
		},
		func(nodes []api.Node, next string) any { return api.NodeList{Nodes: nodes, Next: next} },
		printNodes)
}

func printNodes(e *env, nodes []api.Node) error {
	now := time.Now()
	t := newTable(e.stdout, "ID", "NAME", "STATUS", "STATE", "SUITE", "TAGS", "CORES", "MEMORY", "GPUS", "LAST HEARTBEAT")
	for _, n := range nodes {
		t.row(n.ID, n.Name, n.Status, orDash(n.AgentState), orDash(n.CurrentSuite), orDash(strings.Join(n.Tags, ",")),
			strconv.Itoa(n.Hardware.Cores), bytesIEC(n.Hardware.MemoryBytes),
			strconv.Itoa(len(n.Hardware.GPUs)), ago(n.LastHeartbeat, now))
	}
	return t.flush()
}

func nodeShowCmd(e *env) *cobra.Command {
	return showCmd(e, "show NODE", "Show one node (by ID, name or unique ID prefix)", (*client.Client).Node, printNode)
}

func printNode(e *env, n api.Node) {
	now := time.Now()
	status := n.Status
	if n.StatusReason != "" {
		status += " (" + n.StatusReason + ")"
	}
	t := newTable(e.stdout, "FIELD", "VALUE")
	hw := n.Hardware
	rows := [][2]string{
		{"ID", n.ID}, {"Name", n.Name}, {"Status", status}, {"Agent state", orDash(n.AgentState)},
		{"Suite", orDash(n.CurrentSuite)},
		{"Connected", strconv.FormatBool(n.Connected)}, {"Last heartbeat", ago(n.LastHeartbeat, now)},
		{"Tags", orDash(strings.Join(n.Tags, ", "))}, {"Labels", orDash(labelString(n.Labels))},
		{"Groups", orDash(strings.Join(n.Groups, ", "))},
		{"Machine ID", n.MachineID}, {"Data dir", n.DataDir}, {"Agent version", orDash(n.AgentVersion)},
		{"Host", orDash(hw.Hostname)}, {"OS/arch", hw.OS + "/" + hw.Arch + " " + hw.Kernel},
		{"CPU", fmt.Sprintf("%d cores, %s", hw.Cores, orDash(hw.CPUModel))},
		{"Memory", bytesIEC(hw.MemoryBytes)}, {"Disk", bytesIEC(hw.DiskBytes)},
		{"Registered", n.RegisteredAt.Format(time.RFC3339)},
	}
	if hw.CPULimit > 0 {
		// After the CPU row: a quota short of the cores bounds them.
		i := slices.IndexFunc(rows, func(r [2]string) bool { return r[0] == "CPU" })
		rows = slices.Insert(rows, i+1, [2]string{"CPU limit", fmt.Sprintf("%s CPUs (cgroup quota)", strconv.FormatFloat(hw.CPULimit, 'g', -1, 64))})
	}
	if n.Deployment != "" {
		rows = append(rows, [2]string{"Deployment", n.Deployment + " (a pool's machine; nodemgr deployment show " + n.Deployment + ")"})
	}
	for _, x := range n.Notices {
		rows = append(rows, [2]string{"Notice", x.Message()})
	}
	for _, r := range rows {
		t.row(r[0], r[1])
	}
	if len(hw.GPUs) == 0 {
		t.row("GPUs", "none")
	}
	for _, g := range hw.GPUs {
		t.row(fmt.Sprintf("GPU %d", g.Index), fmt.Sprintf("%s, %s, driver %s", g.Name, bytesIEC(g.MemoryBytes), orDash(g.Driver)))
	}
	printPresence(t, n.Presence)
	t.flush()
}

// printPresence adds what a connected agent publishes about itself.
func printPresence(t *table, p *api.Presence) {
	if p == nil {
		t.row("Presence", "none (the agent is not connected)")
		return
	}
	local := p.LocalAPI.Socket
	switch {
	case p.LocalAPI.CAFingerprint != "":
		local += ", tcp " + p.LocalAPI.TCP + " (https, CA " + p.LocalAPI.CAFingerprint + "; token)"
	case p.LocalAPI.TCP != "":
		local += ", tcp " + p.LocalAPI.TCP + " (token)"
	}
	t.row("Local API", orDash(local))
	t.row("Artifacts", orDash(strings.Join(p.Artifacts, ", ")))
	if len(p.Services) == 0 {
		t.row("Services", "none")
	}
	for _, s := range p.Services {
		t.row("Service "+s.Coordinate, fmt.Sprintf("%s, pid %s, port %s, %s", s.State, intOrDash(s.PID), intOrDash(s.Port), s.Artifact))
	}
}

func labelString(l map[string]string) string {
	keys := slices.Sorted(maps.Keys(l))
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + l[k]
	}
	return strings.Join(parts, ", ")
}

func nodeShutdownCmd(e *env) *cobra.Command {
	var graceful, force bool
	cmd := &cobra.Command{
		Use:   "shutdown NODE (--graceful | --force)",
		Short: "Tell a node's agent to exit",
		Long: `Tell a connected node's agent to exit. --graceful lets running work finish
(within the agent's shutdown grace) and runs cleanup first; --force exits at once.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if graceful == force {
				return fmt.Errorf("choose one of --graceful or --force")
			}
			mode := api.ShutdownGraceful
			if force {
				mode = api.ShutdownForce
			}
			n, err := clientFor(cmd, e).ShutdownNode(cmd.Context(), args[0], mode)
			if err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "sent %s shutdown to node %s (%s)\n", mode, n.Name, n.ID)
			return nil
		},
	}
	cmd.Flags().BoolVar(&graceful, "graceful", false, "let work finish, then exit")
	cmd.Flags().BoolVar(&force, "force", false, "exit at once")
	return cmd
}

func nodeTagCmd(e *env) *cobra.Command {
	var add, remove, set []string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "tag NODE [--add TAG]... [--remove TAG]... [--set TAG,...]",
		Short: "Change a node's tags",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var p api.NodePatch
			if cmd.Flags().Changed("set") {
				p.SetTags = &set
			}
			p.AddTags, p.RemoveTags = add, remove
			if p.SetTags == nil && len(add)+len(remove) == 0 {
				return fmt.Errorf("nothing to change: give --add, --remove or --set")
			}
			n, err := clientFor(cmd, e).PatchNode(cmd.Context(), args[0], p)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(e.stdout, n)
			}
			fmt.Fprintf(e.stdout, "%s tags: %s\n", n.Name, orDash(strings.Join(n.Tags, ", ")))
			return nil
		},
	}
	cmd.Flags().StringSliceVar(&add, "add", nil, "tag to add (repeatable)")
	cmd.Flags().StringSliceVar(&remove, "remove", nil, "tag to remove (repeatable)")
	cmd.Flags().StringSliceVar(&set, "set", nil, "replace all tags with these")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the node as JSON")
	return cmd
}

func nodeLabelCmd(e *env) *cobra.Command {
	var remove []string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "label NODE [KEY=VALUE]... [--remove KEY]...",
		Short: "Set or remove a node's labels",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			set, err := validate.KeyValues("labels", args[1:])
			if err != nil {
				return err
			}
			if len(set)+len(remove) == 0 {
				return fmt.Errorf("nothing to change: give KEY=VALUE or --remove KEY")
			}
			n, err := clientFor(cmd, e).PatchNode(cmd.Context(), args[0], api.NodePatch{SetLabels: set, RemoveLabels: remove})
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(e.stdout, n)
			}
			fmt.Fprintf(e.stdout, "%s labels: %s\n", n.Name, orDash(labelString(n.Labels)))
			return nil
		},
	}
	cmd.Flags().StringSliceVar(&remove, "remove", nil, "label key to remove (repeatable)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the node as JSON")
	return cmd
}

func nodeRmCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "rm NODE",
		Short: "Forget a node that is not connected",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := clientFor(cmd, e).DeleteNode(cmd.Context(), args[0]); err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "removed node %s\n", args[0])
			return nil
		},
	}
}
