package cli

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/client"
)

func newEnsembleCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{Use: "ensemble", Short: "Deploy containers and services across nodes as one, placed by the nodes' books, all or none"}
	cmd.AddCommand(ensembleDeployCmd(e), ensembleLsCmd(e), ensembleShowCmd(e), ensembleManifestCmd(e),
		ensembleLogsCmd(e), ensembleShutdownCmd(e))
	return cmd
}

func ensembleDeployCmd(e *env) *cobra.Command {
	var file, policy string
	var dryRun, asJSON, wait bool
	cmd := &cobra.Command{
		Use:   "deploy -f ensemble.yaml [--dry-run] [--policy binpack|spread] [--wait]",
		Short: "Place an ensemble's replicas on nodes and deploy them, all or none",
		Long: `Place every replica of every allocation on an online node you may write to,
by the nodes' books (free CPUs, memory, GPUs), tags, named nodes, groups and
spread, then lock each replica's resources on its node (a commitment) and
deploy its container from it, allocation by allocation. Each container is told
where the allocations before it answer: NODEMGR_ALLOC_<NAME>_ADDR (host:port),
_HOST and _PORT. If any replica fits nowhere or fails to start, everything
made is undone, and the error says which replica and what each node lacked.
--dry-run prints the plan and deploys nothing.

An ensemble that fits on no node waits for machines when pools would make
them: each replica that fits nowhere asks the pools whose agents carry its
tags and groups, and whose machines hold it, for one machine of its own. It
is deployed as soon as it fits, or fails after its provision_deadline (the
server's --ensemble-provision-deadline, 10m). --wait follows it until it
runs or fails. Without such a pool it is refused at once.

  name: shop
  allocations:
    - name: db
      resources: {cpus: 1, memory_mb: 512}
      placement: {tags: [ssd]}
      container: {image: postgres:16, ports: [{container: 5432}]}
    - name: web
      count: 3
      resources: {cpus: 0.5, memory_mb: 128}
      placement: {spread: true}
      container: {image: shop-web:1, ports: [{container: 8080}]}`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			spec, err := readSpec(file, "give the ensemble with -f FILE", yamlAs[api.EnsembleSpec])
			if err != nil {
				return err
			}
			c := clientFor(cmd, e)
			got, err := c.DeployEnsemble(cmd.Context(), spec, policy, dryRun)
			if err != nil {
				return err
			}
			if got.State == api.EnsembleWaiting && wait && !dryRun {
				if got, err = waitEnsemble(cmd.Context(), e, c, got); err != nil {
					return err
				}
			}
			if err := output(e, asJSON, got, printEnsemble); err != nil {
				return err
			}
			if got.State == api.EnsembleFailed {
				return fmt.Errorf("ensemble %s failed: %s", got.Name, got.Reason)
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", "ensemble file (YAML or JSON; - for stdin)")
	cmd.Flags().StringVar(&policy, "policy", "", "binpack (default: fullest node that fits first) or spread (emptiest first)")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "print the plan; deploy nothing")
	cmd.Flags().BoolVar(&wait, "wait", false, "when it waits for machines, follow it until it runs or fails")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// waitEnsemble follows a waiting ensemble until it is deployed or fails,
// printing its reason on stderr each time it changes.
func waitEnsemble(ctx context.Context, e *env, c *client.Client, en api.Ensemble) (api.Ensemble, error) {
	said := ""
	for en.State == api.EnsembleWaiting || en.State == api.EnsembleDeploying {
		if line := en.State + ": " + en.Reason; line != said {
			fmt.Fprintf(e.stderr, "ensemble %s %s\n", en.Name, line)
			said = line
		}
		select {
		case <-ctx.Done():
			return en, ctx.Err()
		case <-time.After(time.Second):
		}
		var err error
		if en, err = c.Ensemble(ctx, en.Name); err != nil {
			return en, err
		}
	}
	return en, nil
}

func ensembleLsCmd(e *env) *cobra.Command {
	var all, asJSON bool
	cmd := &cobra.Command{
		Use: "ls [--all]", Short: "List your ensembles with their state", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			list, err := clientFor(cmd, e).Ensembles(cmd.Context(), all)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(e.stdout, api.EnsembleList{Ensembles: list})
			}
			t := newTable(e.stdout, "NAME", "STATE", "REPLICAS", "NODES", "AGE", "REASON")
			for _, en := range list {
				nodes := map[string]bool{}
				for _, r := range en.Replicas {
					nodes[r.NodeName] = true
				}
				t.row(en.Name, en.State, strconv.Itoa(len(en.Replicas)), strconv.Itoa(len(nodes)),
					time.Since(en.CreatedAt).Round(time.Second).String(), orDash(truncate(en.Reason, 60)))
			}
			return t.flush()
		},
	}
	cmd.Flags().BoolVar(&all, "all", false, "include shut down and failed ensembles")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func ensembleShowCmd(e *env) *cobra.Command {
	return showCmd(e, "show ENSEMBLE", "Show an ensemble: each replica's node, container, ports and status", (*client.Client).Ensemble, printEnsemble)
}

func printEnsemble(e *env, en api.Ensemble) {
	fmt.Fprintf(e.stdout, "Ensemble  %s (%s)\nState     %s\n", en.Name, orDash(en.ID), en.State)
	if en.Reason != "" {
		fmt.Fprintf(e.stdout, "Reason    %s\n", en.Reason)
	}
	fmt.Fprintln(e.stdout)
	if len(en.Allocations) > 0 {
		t := newTable(e.stdout, "ALLOCATION", "KIND", "STATE", "RUNNING")
		for _, a := range en.Allocations {
			t.row(a.Name, a.Kind, a.State, fmt.Sprintf("%d/%d", a.Running, a.Replicas))
		}
		t.flush()
		fmt.Fprintln(e.stdout)
	}
	t := newTable(e.stdout, "ALLOCATION", "REPLICA", "NODE", "WORKLOAD", "STATUS", "PORTS", "WHY")
	for _, r := range en.Replicas {
		var ports []string
		for _, p := range r.Ports {
			if p.Container == 0 { // a service's port
				ports = append(ports, strconv.Itoa(p.Host))
				continue
			}
			ports = append(ports, fmt.Sprintf("%d->%d", p.Host, p.Container))
		}
		t.row(r.Allocation, strconv.Itoa(r.Replica), r.NodeName, orDash(cmp.Or(r.Container, r.Service)), orDash(r.Status),
			orDash(strings.Join(ports, ",")), orDash(r.Why))
	}
	t.flush()
}

func ensembleManifestCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use: "manifest ENSEMBLE", Short: "Print the ensemble's spec as deployed (YAML)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			got, err := clientFor(cmd, e).Ensemble(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			b, err := yaml.Marshal(got.Spec)
			if err != nil {
				return err
			}
			_, err = e.stdout.Write(b)
			return err
		},
	}
}

func ensembleLogsCmd(e *env) *cobra.Command {
	var tail int
	cmd := &cobra.Command{
		Use: "logs ENSEMBLE ALLOCATION", Short: "Print the output of an allocation's replicas", Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c := clientFor(cmd, e)
			en, err := c.Ensemble(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			found := false
			for _, r := range en.Replicas {
				if r.Allocation != args[1] || r.Container == "" && r.Service == "" {
					continue
				}
				found = true
				b, err := replicaLogs(cmd.Context(), c, r, tail)
				if err != nil {
					return fmt.Errorf("replica %d on %s: %w", r.Replica, r.NodeName, err)
				}
				fmt.Fprintf(e.stdout, "=== %s replica %d on %s (%s)\n", r.Allocation, r.Replica, r.NodeName, cmp.Or(r.Container, r.Service))
				if _, err := e.rawOut().Write(b); err != nil {
					return err
				}
			}
			if !found {
				return fmt.Errorf("ensemble %s has no deployed replica of allocation %q; see nodemgr ensemble show %s", en.Name, args[1], en.Name)
			}
			return nil
		},
	}
	cmd.Flags().IntVar(&tail, "tail", 0, "only the last N lines of each (0: all)")
	return cmd
}

// replicaLogs reads a replica's output: its container's, or its
// service's log (the last 64 KiB), cut to the last tail lines (0: all).
func replicaLogs(ctx context.Context, c *client.Client, r api.EnsembleReplica, tail int) ([]byte, error) {
	if r.Container != "" {
		return c.ContainerLogs(ctx, r.Container, tail)
	}
	b, err := c.ServiceLogs(ctx, r.NodeID, r.Service, 64<<10)
	if err != nil || tail <= 0 {
		return b, err
	}
	lines := bytes.SplitAfter(b, []byte("\n"))
	if len(lines) > 0 && len(lines[len(lines)-1]) == 0 {
		lines = lines[:len(lines)-1]
	}
	return bytes.Join(lines[max(0, len(lines)-tail):], nil), nil
}

func ensembleShutdownCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use: "shutdown ENSEMBLE", Short: "Stop and delete every replica, freeing their books", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			got, err := clientFor(cmd, e).ShutdownEnsemble(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "ensemble %s is %s (%d replicas removed)\n", got.Name, got.State, len(got.Replicas))
			return nil
		},
	}
}
