package cli

import (
	"cmp"
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/client"
)

func newContainerCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "container",
		Short: "Deploy, list, move and delete containers on nodes",
		Long: `Containers on command (the Oakestra node engine's deploy/delete/move/replicate
messages): the node's agent runs the job through its Docker engine with the
job's CPU and memory limits, env, command and ports, and reports its status
(creating → running → completed | failed | dead → undeployed) and usage back.

A job file:

  name: web
  image: nginx:alpine       # must be on the node's engine (docker load / import)
  command: [nginx, -g, "daemon off;"]
  cpus: 0.5
  memory_mb: 128
  env: {MODE: prod}
  ports: [{container: 80}]  # host 0 or absent: a port from the node's allocator
  commitment: ""            # optional: allocate from resources locked with nodemgr node commit
  restart: {policy: on-failure, max_retries: 3}   # never (default), on-failure, always
  stop_timeout: 30s         # SIGTERM, then SIGKILL after this (default 10s)
  volumes: [{source: cache, target: /cache}, {source: ./data, target: /data}]
  pull_policy: never        # default: the image must be on the node; if-not-present, always

cpus and memory_mb left out take the node's container_defaults. A volume is a
named volume or a path in the job's runtime dir on the node; host paths
outside it are refused.`,
	}
	workloadFlags(cmd)
	cmd.AddCommand(containerDeployCmd(e), containerLsCmd(e), containerShowCmd(e), containerLogsCmd(e),
		containerDeleteCmd(e), containerMoveCmd(e, api.ContainerMove), containerMoveCmd(e, api.ContainerReplicate),
		containerSendCmd(e))
	return cmd
}

// containerClient is the server's client, or the local agent's with
// --agent-socket.
func containerClient(cmd *cobra.Command, e *env) (c *client.Client, local bool) {
	if sock := agentSocket(cmd, e); sock != "" {
		return client.NewAgent(sock), true
	}
	return clientFor(cmd, e), false
}

func containerDeployCmd(e *env) *cobra.Command {
	var file, id string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "deploy NODE -f job.yaml",
		Short: "Deploy a container job on a node",
		Args:  nodeArgs(0),
		RunE: onNode(e, func(cmd *cobra.Command, c *client.Client, node string, _ []string) error {
			job, err := readSpec(file, "give the job with -f FILE (YAML: name, image, command, cpus, memory_mb, env, ports; see `nodemgr container --help`)", yamlAs[api.ContainerJob])
			if err != nil {
				return err
			}
			if id != "" {
				job.ID = id
			}
			if !asJSON {
				fmt.Fprintf(e.stderr, "deploying %s (%s) on %s ...\n", job.Name, job.Image, where(node))
			}
			ct, err := c.DeployContainer(cmd.Context(), node, job)
			if err != nil {
				return err
			}
			if err := output(e, asJSON, ct, printContainer); err != nil {
				return err
			}
			if ct.Status == api.ContainerFailed {
				return &exitError{code: 1} // shown as FAILED above: the deploy did not work
			}
			return nil
		}),
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", "job file (YAML or JSON; - for stdin)")
	cmd.Flags().StringVar(&id, "id", "", "job id (default: one is made up)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func containerLsCmd(e *env) *cobra.Command {
	var all, asJSON bool
	var pf pageFlags
	cmd := &cobra.Command{
		Use:   "ls [NODE]",
		Short: "List container jobs (live ones; --all includes finished and undeployed)",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, local := containerClient(cmd, e)
			node := ""
			if len(args) == 1 {
				if local {
					return fmt.Errorf("with --agent-socket give no NODE")
				}
				node = args[0]
			}
			cs, next, err := list(cmd.Context(), pf, func(ctx context.Context, p client.Page) ([]api.Container, string, error) {
				l, err := c.ContainersPage(ctx, node, all, p)
				return l.Containers, l.Next, err
			})
			if err != nil {
				return err
			}
			if local && !all {
				cs = liveOnly(cs)
			}
			if asJSON {
				return printJSON(e.stdout, api.ContainerList{Containers: cs, Next: next})
			}
			defer pf.moreHint(e, len(cs), next)
			return printContainers(e, cs, time.Now())
		},
	}
	cmd.Flags().BoolVar(&all, "all", false, "include finished and undeployed jobs")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	pf.add(cmd, "all-pages")
	return cmd
}

// printContainers is container ls's table: node names, and a reason cut
// to fit (container show and --json give it whole).
func printContainers(e *env, cs []api.Container, now time.Time) error {
	t := newTable(e.stdout, "ID", "NAME", "NODE", "IMAGE", "STATUS", "PORTS", "CPU", "MEMORY", "AGE")
	for _, ct := range cs {
		created := ct.CreatedAt
		t.row(ct.Job.ID, ct.Job.Name, nodeText(ct), ct.Job.Image, clip(statusText(ct), maxStatusWidth), portsText(ct.Ports),
			cpuText(ct), memText(ct), ago(&created, now))
	}
	return t.flush()
}

// maxStatusWidth bounds the STATUS column: a long FAILED reason (an
// engine error) would stretch the table past any screen.
const maxStatusWidth = 60

// clip cuts s to at most n characters, the last one an ellipsis when it
// cut; it cuts between characters, never inside one.
func clip(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// nodeText names a container's node: its name, else its ID (the agent's
// local API knows no names).
func nodeText(c api.Container) string {
	return orDash(cmp.Or(c.NodeName, c.Node))
}

func liveOnly(cs []api.Container) []api.Container {
	var out []api.Container
	for _, c := range cs {
		if !api.ContainerFinal(c.Status) {
			out = append(out, c)
		}
	}
	return out
}

func containerShowCmd(e *env) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "show ID",
		Short: "Show one container job",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, _ := containerClient(cmd, e)
			ct, err := c.Container(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return output(e, asJSON, ct, printContainer)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func containerLogsCmd(e *env) *cobra.Command {
	var tail int
	var follow bool
	cmd := &cobra.Command{
		Use:   "logs ID",
		Short: "Print a container's output (stdout and stderr); -f follows it",
		Long: `Print a container's output (stdout and stderr).

With --follow, keep printing what it writes, until interrupted (Ctrl-C). The
output is polled every half second; while the node is unreachable the
command waits for it.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, _ := containerClient(cmd, e)
			return printLog(cmd.Context(), e, follow,
				func() ([]byte, string, error) { return c.ContainerLogTail(cmd.Context(), args[0], tail) },
				func(ctx context.Context, cursor string) ([]byte, string, error) {
					return c.ContainerLogAfter(ctx, args[0], cursor)
				})
		},
	}
	cmd.Flags().IntVar(&tail, "tail", 200, "lines from the end (0: all)")
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing what is written, until interrupted")
	return cmd
}

func containerDeleteCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "delete ID...",
		Short: "Stop and remove container jobs (their status becomes undeployed)",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, _ := containerClient(cmd, e)
			for _, id := range args {
				ct, err := c.DeleteContainer(cmd.Context(), id)
				if err != nil {
					return fmt.Errorf("delete %s: %w", id, err)
				}
				fmt.Fprintf(e.stdout, "%s %s\n", ct.Job.ID, ct.Status)
			}
			return nil
		},
	}
}

// containerMoveCmd is move (one target) or replicate (one or more).
func containerMoveCmd(e *env, verb string) *cobra.Command {
	use, short, args := "move ID NODE", "Run a container job on another node, then delete it where it was", cobra.ExactArgs(2)
	if verb == api.ContainerReplicate {
		use, short, args = "replicate ID NODE...", "Deploy copies of a container job (new ids) on nodes", cobra.MinimumNArgs(2)
	}
	var asJSON bool
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  args,
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, local := containerClient(cmd, e); local {
				return fmt.Errorf("%s needs a server: it spans nodes", verb)
			}
			cs, err := clientFor(cmd, e).ContainerCommand(cmd.Context(), api.ContainerCommand{
				Command: verb, Job: api.ContainerJob{ID: args[0]}, Worker: args[1:]})
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(e.stdout, api.ContainerList{Containers: orEmpty(cs)})
			}
			for _, ct := range cs {
				fmt.Fprintf(e.stdout, "%s on %s: %s\n", ct.Job.ID, nodeText(ct), statusText(ct))
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func containerSendCmd(e *env) *cobra.Command {
	var file string
	cmd := &cobra.Command{
		Use:   "send -f message.yaml",
		Short: "Send a raw container message {command, job, worker, cluster} (the node engine's format; deploy runs the job on every worker listed, all or none)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			msg, err := readSpec(file, "give the message with -f FILE", yamlAs[api.ContainerCommand])
			if err != nil {
				return err
			}
			cs, err := clientFor(cmd, e).ContainerCommand(cmd.Context(), msg)
			if err != nil {
				return err
			}
			return printJSON(e.stdout, api.ContainerList{Containers: orEmpty(cs)})
		},
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", "message file (YAML or JSON; - for stdin)")
	return cmd
}

func printContainer(e *env, c api.Container) {
	t := newTable(e.stdout, "FIELD", "VALUE")
	rows := [][2]string{
		{"ID", c.Job.ID}, {"Name", c.Job.Name}, {"Node", nodeShowText(c)}, {"Image", c.Job.Image},
		{"Status", statusText(c)}, {"Container", orDash(c.ContainerID)},
		{"Command", orDash(strings.Join(c.Job.Command, " "))}, {"Ports", portsText(c.Ports)},
		{"CPU", cpuText(c)}, {"Memory", memText(c)}, {"Restart", restartText(c)}, {"Volumes", volumesText(c.Job.Volumes)},
		{"Created", c.CreatedAt.Format(time.RFC3339)},
	}
	for _, r := range rows {
		t.row(r[0], r[1])
	}
	t.flush()
}

// nodeShowText is the node's name and ID, for container show.
func nodeShowText(c api.Container) string {
	if c.NodeName != "" && c.NodeName != c.Node {
		return c.NodeName + " (" + c.Node + ")"
	}
	return nodeText(c)
}

// restartText is the job's restart policy and how often it restarted.
func restartText(c api.Container) string {
	p := cmp.Or(c.Job.Restart.Policy, api.ContainerRestartNever)
	if c.Job.Restart.MaxRetries > 0 {
		p += fmt.Sprintf(" (at most %d)", c.Job.Restart.MaxRetries)
	}
	return fmt.Sprintf("%s, %d restarts", p, c.Restarts)
}

func volumesText(vols []api.ContainerVolume) string {
	var parts []string
	for _, v := range vols {
		s := v.Source + ":" + v.Target
		if v.ReadOnly {
			s += ":ro"
		}
		parts = append(parts, s)
	}
	return orDash(strings.Join(parts, ", "))
}

func statusText(c api.Container) string {
	s := c.Status
	if c.Reason != "" {
		s += " (" + c.Reason + ")"
	}
	return s
}

func portsText(ports []api.ContainerPort) string {
	var parts []string
	for _, p := range ports {
		proto := p.Protocol
		if proto == "" {
			proto = "tcp"
		}
		parts = append(parts, fmt.Sprintf("%d->%d/%s", p.Host, p.Container, proto))
	}
	return orDash(strings.Join(parts, ","))
}

func cpuText(c api.Container) string {
	limit := "no limit"
	if c.Job.CPUs > 0 {
		limit = strconv.FormatFloat(c.Job.CPUs, 'f', -1, 64) + " cores"
	}
	if c.Usage == nil {
		return limit
	}
	return fmt.Sprintf("%.1f%% of %s", c.Usage.CPUPercent, limit)
}

func memText(c api.Container) string {
	limit := "no limit"
	if c.Job.MemoryMB > 0 {
		limit = strconv.FormatInt(c.Job.MemoryMB, 10) + " MiB"
	}
	if c.Usage == nil {
		return limit
	}
	return bytesIEC(c.Usage.MemoryBytes) + " / " + limit
}
