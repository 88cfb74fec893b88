package cli

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/client"
)

// The node's books (seed 004): what it offers, what workloads hold.

func nodeResourcesCmd(e *env) *cobra.Command {
	return nodeView(e, "resources NODE", "Show a node's books: onboarded, committed, allocated, free, and what the machine has free", 0,
		func(ctx context.Context, c *client.Client, node string, _ []string) (api.NodeResources, error) {
			return c.Resources(ctx, node)
		}, printResources)
}

func printResources(e *env, res api.NodeResources) {
	if res.AsOf != nil {
		fmt.Fprintf(e.stdout, "The agent is not connected: these are the books it last reported, %s (at %s).\n\n",
			ago(res.AsOf, time.Now()), res.AsOf.Format(time.RFC3339))
	}
	if !res.Onboarded {
		fmt.Fprintln(e.stdout, "Not onboarded: the node offers nothing to containers and services (nodemgr node onboard NODE --share 50).")
	} else {
		reg := res.Registered
		fmt.Fprintf(e.stdout, "Onboarded %d%% of %g cores (score %.0f MiB/s SHA-256 per core), %d MiB memory, %d MiB disk, %d GPUs, since %s\n\n",
			res.SharePercent, reg.CPUs, reg.CPUScore, reg.MemoryMB, reg.DiskMB, reg.GPUs, res.OnboardedAt.Format(time.RFC3339))
	}
	t := newTable(e.stdout, "", "CPUS", "MEMORY MiB", "DISK MiB", "GPUS")
	row := func(name string, r api.Resources) {
		t.row(name, strconv.FormatFloat(r.CPUs, 'f', -1, 64), strconv.FormatInt(r.MemoryMB, 10), strconv.FormatInt(r.DiskMB, 10), strconv.Itoa(r.GPUs))
	}
	row("offered", res.Offered)
	row("committed", res.Committed)
	row("allocated", res.Allocated)
	row("free", res.Free)
	if res.MachineFree != nil {
		row("machine free", *res.MachineFree)
	} else if res.MachineFreeError != "" {
		t.row("machine free", "unknown: "+res.MachineFreeError)
	}
	t.flush()
	if len(res.Allocations) > 0 {
		fmt.Fprintln(e.stdout)
		printAllocations(e, res.Allocations)
	}
	for _, c := range res.Commitments {
		fmt.Fprintf(e.stdout, "committed %s by %s: %g CPUs, %d MiB, until %s\n", c.ID, c.Owner, c.CPUs, c.MemoryMB, c.ExpiresAt.Format(time.RFC3339))
	}
}

func printAllocations(e *env, as []api.Allocation) {
	t := newTable(e.stdout, "ID", "KIND", "NAME", "STATE", "CPUS", "MEMORY MiB", "GPUS", "PORTS", "AGE")
	now := time.Now()
	for _, a := range as {
		created := a.CreatedAt
		ports := make([]string, len(a.Ports))
		for i, p := range a.Ports {
			ports[i] = strconv.Itoa(p)
		}
		t.row(a.ID, a.Kind, a.Name, orDash(a.State), strconv.FormatFloat(a.CPUs, 'f', -1, 64), strconv.FormatInt(a.MemoryMB, 10),
			strconv.Itoa(a.GPUs), orDash(strings.Join(ports, ",")), ago(&created, now))
	}
	t.flush()
}

func nodeOnboardCmd(e *env) *cobra.Command {
	var share int
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "onboard NODE --share PERCENT",
		Short: "Measure a node (cores, CPU benchmark, memory, disk, GPUs) and offer a share of it to workloads",
		Args:  nodeArgs(0),
		RunE: onNode(e, func(cmd *cobra.Command, c *client.Client, node string, _ []string) error {
			o, err := c.Onboard(cmd.Context(), node, share)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(e.stdout, o)
			}
			fmt.Fprintf(e.stdout, "%s offers %d%%: %g CPUs, %d MiB memory, %d MiB disk, %d GPUs\n", where(node), o.SharePercent,
				o.Offered.CPUs, o.Offered.MemoryMB, o.Offered.DiskMB, o.Offered.GPUs)
			return nil
		}),
	}
	cmd.Flags().IntVar(&share, "share", 50, "percent of the machine to offer, 10-90")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func nodeOffboardCmd(e *env) *cobra.Command {
	var force bool
	cmd := &cobra.Command{
		Use:   "offboard NODE",
		Short: "Withdraw a node's offer (refused while workloads hold resources, unless --force)",
		Args:  nodeArgs(0),
		RunE: onNode(e, func(cmd *cobra.Command, c *client.Client, node string, _ []string) error {
			if err := c.Offboard(cmd.Context(), node, force); err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "%s offboarded: nothing new is placed there\n", where(node))
			return nil
		}),
	}
	cmd.Flags().BoolVar(&force, "force", false, "offboard although workloads run; they keep their allocations until they end")
	return cmd
}

func newAllocationCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "allocation",
		Short: "The workloads holding a node's resources: worker pools, services, containers",
		Long: `Every workload on a node holds an allocation in the node's books: a container
job its CPUs and memory, a service its expected memory and port, a suite's
worker pool the cores it is pinned to (booking nothing: its workers share them).
Allocation ids are kind:name, e.g. container:web1 or service:1.echo.ops.prod.`,
	}
	workloadFlags(cmd)
	cmd.AddCommand(allocationLsCmd(e), allocationShowCmd(e),
		allocationActionCmd(e, "stop", "Stop the workload behind an allocation"),
		allocationActionCmd(e, "restart", "Restart the workload behind an allocation (a container is deployed afresh)"),
		allocationLogsCmd(e))
	return cmd
}

func allocationLsCmd(e *env) *cobra.Command {
	return nodeView(e, "ls NODE", "List a node's allocations", 0,
		func(ctx context.Context, c *client.Client, node string, _ []string) (api.AllocationList, error) {
			as, err := c.Allocations(ctx, node)
			return api.AllocationList{Allocations: orEmpty(as)}, err
		}, func(e *env, l api.AllocationList) { printAllocations(e, l.Allocations) })
}

func allocationShowCmd(e *env) *cobra.Command {
	return nodeView(e, "show NODE ID", "Show one allocation (JSON)", 1,
		func(ctx context.Context, c *client.Client, node string, rest []string) (api.Allocation, error) {
			return c.Allocation(ctx, node, rest[0])
		}, nil)
}

// allocationArg names an allocation argument, for errors.
const allocationArg = "allocation (see nodemgr allocation ls NODE)"

func allocationActionCmd(e *env, action, short string) *cobra.Command {
	return &cobra.Command{
		Use:   action + " NODE ID",
		Short: short,
		Args:  nodeArgs(1),
		RunE: onNodeOne(e, allocationArg, func(cmd *cobra.Command, c *client.Client, node, name string) error {
			a, err := c.AllocationAction(cmd.Context(), node, name, action)
			if err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "%s: %s\n", a.ID, orDash(a.State))
			return nil
		}),
	}
}

func allocationLogsCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "logs NODE ID",
		Short: "Print the log of the workload behind an allocation",
		Args:  nodeArgs(1),
		RunE: onNodeOne(e, allocationArg, func(cmd *cobra.Command, c *client.Client, node, name string) error {
			b, err := c.AllocationLogs(cmd.Context(), node, name)
			if err != nil {
				return err
			}
			_, err = e.rawOut().Write(b)
			return err
		}),
	}
}

func nodeCommitCmd(e *env) *cobra.Command {
	var req api.CommitRequest
	var ttl time.Duration
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "commit NODE --owner WHO --ttl D [--cpus N] [--memory-mb N] [--port P]...",
		Short: "Lock resources and ports on a node for a workload about to be placed (released after --ttl unless used)",
		Long: `Lock resources on a node before placing a workload there, so that nothing
else takes them meanwhile (the node's "committed" resources). A container job
that names the commitment (commitment: ID in its file) is allocated from it;
an unused commitment expires after --ttl, or give it back with node release.`,
		Args: nodeArgs(0),
		RunE: onNode(e, func(cmd *cobra.Command, c *client.Client, node string, _ []string) error {
			req.TTL = api.Duration(ttl)
			cm, err := c.Commit(cmd.Context(), node, req)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(e.stdout, cm)
			}
			fmt.Fprintf(e.stdout, "%s: %g CPUs, %d MiB memory, %d MiB disk, %d GPUs, ports %v locked until %s\n",
				cm.ID, cm.CPUs, cm.MemoryMB, cm.DiskMB, cm.GPUs, cm.Ports, cm.ExpiresAt.Format(time.RFC3339))
			return nil
		}),
	}
	fl := cmd.Flags()
	fl.StringVar(&req.Owner, "owner", "", "who commits, e.g. a scheduler's job id")
	fl.DurationVar(&ttl, "ttl", 5*time.Minute, "how long the lock holds if unused")
	fl.Float64Var(&req.CPUs, "cpus", 0, "cores")
	fl.Int64Var(&req.MemoryMB, "memory-mb", 0, "memory, MiB")
	fl.Int64Var(&req.DiskMB, "disk-mb", 0, "disk, MiB")
	fl.IntVar(&req.GPUs, "gpus", 0, "GPUs")
	fl.IntSliceVar(&req.Ports, "port", nil, "a port to lock, repeatable")
	fl.BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func nodeReleaseCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "release NODE COMMITMENT",
		Short: "Give a commitment's resources back",
		Args:  nodeArgs(1),
		RunE: onNodeOne(e, "commitment (see nodemgr node resources NODE)", func(cmd *cobra.Command, c *client.Client, node, id string) error {
			if err := c.Release(cmd.Context(), node, id); err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "%s released\n", id)
			return nil
		}),
	}
}
