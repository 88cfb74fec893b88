//go:build !agentonly

package cli

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/client"
	"github.com/nodemgr/nodemgr/internal/coordinator/schedule"
)

// poolFileHelp describes a pool file, for pool --help and pool apply --help.
const poolFileHelp = `A pool file (YAML or JSON; - reads standard input):

  name: ci
  template: worker            # nodemgr template ls
  provider: docker            # or, instead of both, candidates:
  # candidates:               #   the policy ranks them (nodemgr schedule explain)
  #   - {template: worker, provider: docker, price: 0.02}
  #   - {template: worker-big, provider: aws, price: 0.10}
  # policy: cheapest          # fastest, spread, binpack, prefer-local
  tags: [linux]               # given to its agents: suites needing them are its demand
  groups: [ci]                # likewise; a suite of group ci needs it
  labels: {team: build}       # given to its agents
  min: 0                      # kept running whatever the demand
  max: 4                      # never more, machines on their way included
  max_cpus: 16                # optional caps over all its machines (0: none)
  max_memory_mb: 32768
  idle_timeout: 5m            # idle this long: drained and destroyed
  min_age: 1m                 # no scale-down younger than this
  bootstrap_timeout: 3m       # its agent must register within this
  max_launching: 4            # machines being made at once
  priority: 0                 # pools serving the same work: higher asked first
  paused: false               # true: launches no machine (pool pause/resume)

A server listening on loopback takes docker templates only with
overrides: {docker: {network_mode: host}}; otherwise start it with
--agent-server-url set to an address the machines reach.`

func newPoolCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{Use: "pool", Short: "Pools of machines nodemgr makes and removes as work asks",
		Long: `A pool keeps machines sized to demand: while suites with Ready tasks that its
agents may run wait for nodes, it makes machines from a template on a
provider, starts an agent on each (a static nodemgr binary, a config with a
single-use join token), and destroys them when they have been idle for
idle_timeout.

` + poolFileHelp + `

Machines move requested → provisioning → bootstrapping → ready → draining →
terminating → gone, or failed (with the reason, after what was made is
destroyed). pool events says why each step happened.`}
	cmd.AddCommand(poolApplyCmd(e), poolLsCmd(e), poolShowCmd(e), poolRmCmd(e), poolEventsCmd(e),
		poolScaleCmd(e), poolPauseCmd(e, true), poolPauseCmd(e, false))
	return cmd
}

// LoadPoolFile reads a pool spec from YAML (or JSON, which is YAML),
// strictly: a mistyped key is an error at FILE:LINE:COL with a hint.
func LoadPoolFile(path string) (api.PoolSpec, error) {
	var spec api.PoolSpec
	if err := loadYAML(path, &spec); err != nil {
		return spec, err
	}
	if spec.Name == "" {
		return spec, fmt.Errorf("%s: name: required; name the pool, e.g. name: ci", path)
	}
	return spec, nil
}

func poolApplyCmd(e *env) *cobra.Command {
	var file string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "apply -f pool.yaml",
		Short: "Create or replace a pool from a YAML file",
		Long: `Create or replace a pool. The file is read strictly: a mistyped key is an
error at FILE:LINE:COL with the nearest known one.

` + poolFileHelp,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			spec, err := readSpec(file, "give the pool file with -f FILE (YAML: name, template, provider, min, max, idle_timeout; see nodemgr pool --help)", LoadPoolFile)
			if err != nil {
				return err
			}
			p, err := clientFor(cmd, e).ApplyPool(cmd.Context(), spec)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(e.stdout, p)
			}
			verb := "updated"
			if p.CreatedAt.Equal(p.UpdatedAt) {
				verb = "created"
			}
			fmt.Fprintf(e.stdout, "pool %s %s: desired %d (min %d, max %d), machines: %s\n",
				p.Spec.Name, verb, p.Desired, p.Spec.Min, p.Spec.Max, machineCounts(p.Machines))
			if p.Waiting != "" {
				fmt.Fprintf(e.stderr, "waiting: %s\n", p.Waiting)
			}
			fmt.Fprintf(e.stderr, "watch it with: nodemgr pool show %s, nodemgr pool events %s -f\n", p.Spec.Name, p.Spec.Name)
			return nil
		},
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", "pool file (YAML or JSON; - for standard input)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func poolLsCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{Use: "ls", Short: "List pools with their machines by state", Args: cobra.NoArgs}
	return lsCmd(e, cmd, "all",
		(*client.Client).PoolsPage,
		func(pools []api.Pool, next string) any { return api.PoolList{Pools: pools, Next: next} },
		printPools)
}

// maxWaitingWidth bounds pool ls's WAITING column; pool show gives it whole.
const maxWaitingWidth = 60

func printPools(e *env, pools []api.Pool) error {
	t := newTable(e.stdout, "NAME", "TEMPLATE/PROVIDER", "MIN", "MAX", "DESIRED", "MACHINES", "WAITING")
	for _, p := range pools {
		name := p.Spec.Name
		if p.Spec.Paused {
			name += " (paused)"
		}
		t.row(name, poolSource(p.Spec), strconv.Itoa(p.Spec.Min), strconv.Itoa(p.Spec.Max), strconv.Itoa(p.Desired),
			machineCounts(p.Machines), orDash(clip(p.Waiting, maxWaitingWidth)))
	}
	return t.flush()
}

// poolSource says what a pool makes machines from, in one cell.
func poolSource(s api.PoolSpec) string {
	if n := len(s.Candidates); n > 0 {
		return fmt.Sprintf("%d candidate%s", n, plural(n))
	}
	return s.Template + "/" + s.Provider
}

// machineStates is the order machine counts are told in: the ones that
// serve first, then the way a machine goes.
var machineStates = []string{api.MachineReady, api.MachineRequested, api.MachineProvisioning, api.MachineBootstrapping,
	api.MachineDraining, api.MachineTerminating}

// machineCounts tells a pool's machines by state: "2 ready, 1 bootstrapping".
func machineCounts(m map[string]int) string {
	var parts []string
	for _, s := range machineStates {
		if m[s] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", m[s], s))
		}
	}
	for _, s := range slices.Sorted(maps.Keys(m)) {
		if !slices.Contains(machineStates, s) && m[s] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", m[s], s))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

func poolShowCmd(e *env) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use: "show POOL", Short: "Show a pool: its spec, demand, and machines", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := clientFor(cmd, e).Pool(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(e.stdout, p)
			}
			return printPool(e, p, time.Now())
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func printPool(e *env, p api.PoolDetail, now time.Time) error {
	s := p.Spec
	t := newTable(e.stdout, "FIELD", "VALUE")
	t.row("Name", s.Name)
	if len(s.Candidates) == 0 {
		t.row("Makes", s.Template+" on "+s.Provider)
	}
	for i, c := range s.Candidates {
		t.row(fmt.Sprintf("Candidate %d", i+1), c.Template+" on "+c.Provider+", "+priceText(c.Price))
	}
	limits := []string{fmt.Sprintf("min %d, max %d machines", s.Min, s.Max)}
	if s.MaxCPUs > 0 {
		limits = append(limits, fmt.Sprintf("max %g CPUs", s.MaxCPUs))
	}
	if s.MaxMemoryMB > 0 {
		limits = append(limits, fmt.Sprintf("max %d MiB memory", s.MaxMemoryMB))
	}
	for _, r := range [][2]string{
		{"Paused", pausedText(s.Paused)},
		{"Priority", strconv.Itoa(s.Priority)},
		{"Policy", orDash(s.Policy)},
		{"Limits", strings.Join(limits, ", ")},
		{"Launching", fmt.Sprintf("at most %d at once", s.MaxLaunching)},
		{"Timeouts", fmt.Sprintf("idle %s (min age %s), bootstrap %s", time.Duration(s.IdleTimeout), time.Duration(s.MinAge), time.Duration(s.BootstrapTimeout))},
		{"Tags", orDash(strings.Join(s.Tags, ", "))},
		{"Labels", orDash(labelString(s.Labels))},
		{"Groups", orDash(strings.Join(s.Groups, ", "))},
		{"Desired", strconv.Itoa(p.Desired)},
		{"Demand", orDash(p.Demand)},
		{"Waiting", orDash(p.Waiting)},
		{"Machines", machineCounts(p.Machines)},
		{"Created", p.CreatedAt.Format(time.RFC3339)},
		{"Updated", p.UpdatedAt.Format(time.RFC3339)},
	} {
		t.row(r[0], r[1])
	}
	if err := t.flush(); err != nil {
		return err
	}
	if len(p.MachineList) == 0 {
		fmt.Fprintln(e.stdout, "\nNo machines.")
		return nil
	}
	fmt.Fprintln(e.stdout)
	return printPoolMachines(e, p.MachineList, now)
}

// printPoolMachines is pool show's machine table; a reason is cut to fit
// (--json gives it whole).
func printPoolMachines(e *env, ms []api.PoolMachine, now time.Time) error {
	t := newTable(e.stdout, "ID", "STATE", "TEMPLATE", "PROVIDER", "NODE", "DEPLOYMENT", "AGE", "REASON")
	for _, m := range ms {
		created := m.CreatedAt
		reason := m.StateReason
		if reason == "" && m.IdleSince != nil {
			reason = "idle since " + ago(m.IdleSince, now)
		}
		t.row(m.ID, m.State, m.Template, m.Provider, orDash(m.Node), orDash(m.Deployment), ago(&created, now),
			orDash(clip(reason, maxStatusWidth)))
	}
	return t.flush()
}

// pausedText says whether a pool launches machines.
func pausedText(paused bool) string {
	if paused {
		return "yes: launches no machine (nodemgr pool resume)"
	}
	return "no"
}

// priceText is a price per hour (free for 0), or says it is unknown.
func priceText(p *float64) string {
	switch {
	case p == nil || !(*p >= 0):
		return "price unknown"
	case *p == 0:
		return "free"
	}
	return fmt.Sprintf("$%g/h", *p)
}

func poolScaleCmd(e *env) *cobra.Command {
	var minN, maxN int
	cmd := &cobra.Command{
		Use:   "scale POOL [--min N] [--max N]",
		Short: "Change a pool's min or max machines, leaving the rest of its spec",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var p api.PoolPatch
			if cmd.Flags().Changed("min") {
				p.Min = &minN
			}
			if cmd.Flags().Changed("max") {
				p.Max = &maxN
			}
			if p.Min == nil && p.Max == nil {
				return fmt.Errorf("give --min N, --max N or both")
			}
			return patchPool(cmd, e, args[0], p)
		},
	}
	cmd.Flags().IntVar(&minN, "min", 0, "machines kept running whatever the demand")
	cmd.Flags().IntVar(&maxN, "max", 0, "machines never exceeded")
	return cmd
}

func poolPauseCmd(e *env, pause bool) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "pause POOL",
		Short: "Stop a pool launching machines; the machines it has stay",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return patchPool(cmd, e, args[0], api.PoolPatch{Paused: &pause})
		},
	}
	if !pause {
		cmd.Use, cmd.Short = "resume POOL", "Let a paused pool launch machines again"
	}
	return cmd
}

// patchPool changes part of a pool's spec and says what it is now.
func patchPool(cmd *cobra.Command, e *env, name string, patch api.PoolPatch) error {
	p, err := clientFor(cmd, e).PatchPool(cmd.Context(), name, patch)
	if err != nil {
		return err
	}
	state := ""
	if p.Spec.Paused {
		state = ", paused"
	}
	fmt.Fprintf(e.stdout, "pool %s: min %d, max %d%s; desired %d, machines: %s\n",
		p.Spec.Name, p.Spec.Min, p.Spec.Max, state, p.Desired, machineCounts(p.Machines))
	return nil
}

func poolRmCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use: "rm POOL", Short: "Remove a pool; its machines are drained and destroyed", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := clientFor(cmd, e).DeletePool(cmd.Context(), args[0]); err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "removed pool %s: its machines are drained as their work ends, then destroyed (nodemgr pool events %s -f)\n", args[0], args[0])
			return nil
		},
	}
}

// eventsPoll is how often pool events --follow asks for new events (a
// variable so that tests need not wait).
var eventsPoll = time.Second

func poolEventsCmd(e *env) *cobra.Command {
	var asJSON, follow bool
	var pf pageFlags
	cmd := &cobra.Command{
		Use:   "events POOL",
		Short: "List a pool's decisions and their reasons, oldest first; -f follows them",
		Long: `List a pool's decisions, oldest first: scale-up, launched, ready, failed (and the
backoff of its candidate), waiting (and why), scale-down, gone, swept. A
removed pool's events stay listed.

With --follow, print every event from --after on, then new ones as they come
(polled every second), until interrupted (Ctrl-C).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c := clientFor(cmd, e)
			read := func(ctx context.Context, p client.Page) ([]api.PoolEvent, string, error) {
				l, err := c.PoolEventsPage(ctx, args[0], p)
				return l.Events, l.Next, err
			}
			if follow {
				if asJSON {
					return usagef("--follow prints a table; drop --json, or page with --after the next cursor --json gives")
				}
				if pf.limit < 1 || pf.limit > client.MaxPageLimit {
					return usagef("--limit must be from 1 to %d, got %d", client.MaxPageLimit, pf.limit)
				}
				return followEvents(cmd.Context(), e, client.Page{Limit: pf.limit, After: pf.after}, read)
			}
			evs, next, err := list(cmd.Context(), pf, read)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(e.stdout, api.PoolEventList{Events: evs, Next: next})
			}
			defer pf.moreHint(e, len(evs), next)
			w := newEventWriter(e.stdout)
			return w.print(evs)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing new events, until interrupted")
	pf.add(cmd, "all")
	return cmd
}

// eventWriter prints pool events as a table whose columns stay put from
// one batch to the next, so that a followed table stays aligned.
type eventWriter struct {
	w         io.Writer
	header    bool
	timeWidth int // of a time in the local zone: "Z" or an offset
}

func newEventWriter(w io.Writer) *eventWriter {
	return &eventWriter{w: w, timeWidth: len(time.Now().Format(time.RFC3339))}
}

// Widths the KIND and MACHINE cells are padded to ("pm-" and 12 characters).
const eventKindWidth, eventMachineWidth = 12, 15

func (ew *eventWriter) print(evs []api.PoolEvent) error {
	t := &table{tw: tabwriter.NewWriter(ew.w, 0, 4, 2, ' ', 0)}
	pad := func(s string, n int) string { return fmt.Sprintf("%-*s", n, s) }
	if !ew.header {
		t.row(pad("TIME", ew.timeWidth), pad("KIND", eventKindWidth), pad("MACHINE", eventMachineWidth), "MESSAGE")
		ew.header = true
	}
	for _, ev := range evs {
		t.row(pad(ev.At.Local().Format(time.RFC3339), ew.timeWidth), pad(ev.Kind, eventKindWidth),
			pad(orDash(ev.Machine), eventMachineWidth), ev.Message)
	}
	return t.flush()
}

// followEvents prints a pool's events from the page p on, then polls for
// new ones until ctx ends. It keeps the cursor of the page it is in and
// the last event printed, so each poll reads at most one page and prints
// each event once. A server that cannot be reached is waited for.
func followEvents(ctx context.Context, e *env, p client.Page, read func(context.Context, client.Page) ([]api.PoolEvent, string, error)) error {
	w := newEventWriter(e.stdout)
	var last int64
	return follow(ctx, e, eventsPoll, func() (bool, error) {
		evs, next, err := read(ctx, p)
		if err != nil {
			return false, err
		}
		var fresh []api.PoolEvent
		for _, ev := range evs {
			if ev.ID > last {
				fresh = append(fresh, ev)
				last = ev.ID
			}
		}
		if len(fresh) > 0 || !w.header {
			if err := w.print(fresh); err != nil {
				return false, err
			}
		}
		if next != "" && next != p.After {
			p.After = next
			return true, nil // the next page is there now
		}
		return false, nil
	})
}

func newScheduleCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{Use: "schedule", Short: "See where a machine would come from"}
	cmd.AddCommand(scheduleExplainCmd(e))
	return cmd
}

func scheduleExplainCmd(e *env) *cobra.Command {
	var req api.ScheduleRequest
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "explain [--cpus N] [--memory-mb N] [--tag T]... [--arch A] [--policy P]",
		Short: "Rank every pool's candidates for a machine, and say why each is or is not feasible",
		Long: `Rank every candidate of every pool (a template on a provider) for one machine
that needs what the flags say, as a pool would when it makes one. A candidate
is infeasible when its provider or template is unavailable, it is backing off
after a failure, its arch differs, it is too small, its pool lacks a tag, or
its pool is at max, max_cpus or max_memory_mb. The feasible ones are ranked
by the policy:

  cheapest       lowest price per hour first (0 is free); no price last (default)
  fastest        shortest measured boot (request to ready, p50) first
  spread         fewest machines alive first
  binpack        the smallest machine that fits first
  prefer-local   providers on the server's own host first (docker, local, and libvirt
                 on a URI with no remote host, e.g. qemu:///system), then cheapest

Example:
  nodemgr schedule explain --cpus 2 --memory-mb 2048 --tag linux --policy fastest`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			x, err := clientFor(cmd, e).ExplainSchedule(cmd.Context(), req)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(e.stdout, x)
			}
			if len(x.Candidates) == 0 {
				fmt.Fprintln(e.stderr, "no pool has candidates: make one with nodemgr pool apply -f pool.yaml")
				return nil
			}
			return printExplanation(e, x)
		},
	}
	cmd.Flags().Float64Var(&req.CPUs, "cpus", 0, "CPUs the machine needs")
	cmd.Flags().Int64Var(&req.MemoryMB, "memory-mb", 0, "memory the machine needs, in MiB")
	cmd.Flags().StringSliceVar(&req.Tags, "tag", nil, "tag its pool must give its agents (repeatable)")
	cmd.Flags().StringVar(&req.Arch, "arch", "", "architecture the machine needs, e.g. x86_64")
	cmd.Flags().StringVar(&req.Policy, "policy", "", "how to rank: "+strings.Join(schedule.Policies, ", ")+" (default "+schedule.Cheapest+")")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func printExplanation(e *env, x api.ScheduleExplanation) error {
	fmt.Fprintf(e.stdout, "policy %s\n", x.Policy)
	t := newTable(e.stdout, "RANK", "POOL", "TEMPLATE", "PROVIDER", "PRICE", "CPUS", "MEMORY", "BOOT P50", "FEASIBLE", "WHY / REASONS")
	for _, v := range x.Candidates {
		rank, feasible, why := "-", "no", strings.Join(v.Reasons, "; ")
		if v.Feasible {
			rank, feasible, why = strconv.Itoa(v.Rank), "yes", v.Why
		}
		price, cpus, mem, boot := "-", "-", "-", "-"
		if v.Price != nil && *v.Price >= 0 {
			price = fmt.Sprintf("$%g/h", *v.Price)
		}
		if v.CPUs > 0 {
			cpus = strconv.FormatFloat(v.CPUs, 'g', -1, 64)
		}
		if v.MemoryMB > 0 {
			mem = fmt.Sprintf("%d MiB", v.MemoryMB)
		}
		if v.BootP50 > 0 {
			boot = time.Duration(v.BootP50).Round(100 * time.Millisecond).String()
		}
		t.row(rank, orDash(v.Pool), v.Template, v.Provider, price, cpus, mem, boot, feasible, orDash(why))
	}
	return t.flush()
}
