//go:build !agentonly

package cli

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/client"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
)

// maxProvisionCount is the most machines one provision request makes (the
// server's limit).
const maxProvisionCount = 100

func newProvisionCmd(e *env) *cobra.Command {
	var req api.ProvisionRequest
	var asJSON, noWait bool
	cmd := &cobra.Command{
		Use:   "provision --template NAME --provider PROVIDER [--count N]",
		Short: "Make machines from a template with a provider (" + providerList() + ")",
		Long: `Make machines from a template: the server renders the template for the
provider (see nodemgr template render), asks the provider for each machine in
parallel, and tracks them as deployments. This command shows their progress
until every one is running or failed (--no-wait returns at once).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// The API reads an absent count, which is 0 on the wire, as
			// one machine; a count the user typed must mean what it says.
			if req.Count < 1 || req.Count > maxProvisionCount {
				return &usageError{errdefs.Field("count", "must be between 1 and %d, got %d", maxProvisionCount, req.Count)}
			}
			c := clientFor(cmd, e)
			deps, err := c.Provision(cmd.Context(), req)
			if err != nil {
				return err
			}
			if !noWait {
				if deps, err = waitDeployments(cmd, e, deps); err != nil {
					return err
				}
			}
			if asJSON {
				return printJSON(e.stdout, api.DeploymentList{Deployments: deps})
			}
			printDeployments(e, deps)
			warned := map[string]bool{}
			for _, d := range deps {
				// The local provider says it is insecure; say it on.
				if w, ok := d.Extra["warning"].(string); ok && !warned[w] {
					fmt.Fprintln(e.stderr, "warning:", w)
					warned[w] = true
				}
			}
			for _, d := range deps {
				if d.State == api.DeploymentFailed {
					return &exitError{code: 1}
				}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&req.Template, "template", "", "template name (nodemgr template ls)")
	cmd.Flags().StringVar(&req.Provider, "provider", "", "provider: "+providerList())
	cmd.Flags().IntVar(&req.Count, "count", 1, fmt.Sprintf("how many machines (1-%d)", maxProvisionCount))
	cmd.Flags().StringVar(&req.Name, "name", "", "machine name, or prefix with --count (default: the template's name)")
	cmd.Flags().BoolVar(&noWait, "no-wait", false, "return once the server has accepted the request")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// waitDeployments polls until no deployment is pending, printing a
// progress line as states change.
func waitDeployments(cmd *cobra.Command, e *env, deps []api.Deployment) ([]api.Deployment, error) {
	c := clientFor(cmd, e)
	start := time.Now()
	last := ""
	for {
		counts := map[string]int{}
		pending := 0
		for i, d := range deps {
			if d.State == "pending" {
				cur, err := c.Deployment(cmd.Context(), d.ID)
				if err != nil {
					return deps, err
				}
				deps[i] = cur
			}
			counts[deps[i].State]++
			if deps[i].State == "pending" {
				pending++
			}
		}
		line := fmt.Sprintf("%d machines: %d pending, %d running, %d failed (%s)", len(deps), counts["pending"], counts["running"], counts[api.DeploymentFailed], time.Since(start).Round(100*time.Millisecond))
		if line != last {
			redraw(e.rawErr(), line)
			last = line
		}
		if pending == 0 {
			fmt.Fprintln(e.stderr)
			return deps, nil
		}
		select {
		case <-cmd.Context().Done():
			fmt.Fprintln(e.stderr)
			return deps, cmd.Context().Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func printDeployments(e *env, deps []api.Deployment) {
	t := newTable(e.stdout, "ID", "NAME", "PROVIDER", "STATE", "TEMPLATE", "RESOURCE", "ADDRESS", "REASON")
	for _, d := range deps {
		res := d.ResourceID
		if len(res) > 12 {
			res = res[:12]
		}
		t.row(d.ID, d.Name, d.Provider, d.State, orDash(d.Template), orDash(res), orDash(d.Address), orDash(truncate(d.StateReason, 60)))
	}
	t.flush()
}

// printDeployment is deployment show: one machine, and the node its agent
// registered as when it has one.
func printDeployment(e *env, d api.Deployment) {
	t := newTable(e.stdout, "FIELD", "VALUE")
	rows := [][2]string{{"ID", d.ID}, {"Name", d.Name}, {"Provider", d.Provider}, {"State", d.State},
		{"Reason", orDash(d.StateReason)}, {"Template", d.Template}, {"Resource", orDash(d.ResourceID)},
		{"Address", orDash(d.Address)}, {"Executors", orDash(strings.Join(d.Executors, ", "))},
		{"Labels", orDash(labelString(d.Labels))}}
	if d.Node != "" {
		rows = append(rows, [2]string{"Node", d.Node + " (nodemgr node show " + d.Node + ")"})
	}
	rows = append(rows, [2]string{"Created", d.CreatedAt.Format(time.RFC3339)})
	for _, r := range rows {
		t.row(r[0], r[1])
	}
	t.flush()
}

func newDeploymentCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{Use: "deployment", Short: "Machines made by providers"}
	var all bool
	ls := &cobra.Command{Use: "ls", Short: "List deployments (live ones; --all for terminated too)", Args: cobra.NoArgs}
	ls.Flags().BoolVar(&all, "all", false, "include terminated deployments")
	// --all says which deployments, as it did before lists paged.
	ls = lsCmd(e, ls, "all-pages",
		func(c *client.Client, ctx context.Context, p client.Page) (api.DeploymentList, error) {
			l, err := c.DeploymentsPage(ctx, "", p)
			if !all {
				l.Deployments = slices.DeleteFunc(l.Deployments, func(d api.Deployment) bool { return d.State == "terminated" })
			}
			return l, err
		},
		func(deps []api.Deployment, next string) any { return api.DeploymentList{Deployments: deps, Next: next} },
		func(e *env, deps []api.Deployment) error {
			printDeployments(e, deps)
			return nil
		})
	var showJSON bool
	show := &cobra.Command{
		Use: "show DEPLOYMENT", Short: "Show one deployment", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			d, err := clientFor(cmd, e).Deployment(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return output(e, showJSON, d, printDeployment)
		},
	}
	show.Flags().BoolVar(&showJSON, "json", false, "print JSON (with the rendered Extra map)")
	destroy := &cobra.Command{
		Use: "destroy DEPLOYMENT...", Short: "Remove machines (the records stay, terminated)", Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			for _, ref := range args {
				d, err := clientFor(cmd, e).DestroyDeployment(cmd.Context(), ref)
				if err != nil {
					return err
				}
				fmt.Fprintf(e.stdout, "destroyed %s (%s)\n", d.Name, d.ID)
			}
			return nil
		},
	}
	cmd.AddCommand(ls, show, destroy)
	return cmd
}

func newLifecycleCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{Use: "lifecycle", Short: "Start, stop, hibernate, reboot or terminate a provisioned machine",
		Long: `Control a deployment through its provider's own API. States follow EC2:
pending, running, stopping, stopped, shutting-down, terminated, hibernated.
A verb the provider cannot do is refused before anything is touched.`}
	// Other tools' words for the verbs, so a typo or habit gets a
	// suggestion ("suspend" is Vagrant's hibernate).
	aliases := map[string][]string{"start": {"resume", "unpause"}, "hibernate": {"suspend", "pause"}, "reboot": {"restart"}}
	for _, verb := range []string{"start", "stop", "hibernate", "reboot", "terminate"} {
		cmd.AddCommand(&cobra.Command{
			Use: verb + " DEPLOYMENT", Short: strings.ToUpper(verb[:1]) + verb[1:] + " a machine", Args: cobra.ExactArgs(1),
			SuggestFor: aliases[verb],
			RunE: func(cmd *cobra.Command, args []string) error {
				d, err := clientFor(cmd, e).Lifecycle(cmd.Context(), args[0], verb)
				if err != nil {
					return err
				}
				fmt.Fprintf(e.stdout, "%s is %s\n", d.Name, d.State)
				return nil
			},
		})
	}
	return cmd
}
