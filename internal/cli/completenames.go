//go:build !agentonly

package cli

import (
	"context"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/coordinator/schedule"
	"github.com/nodemgr/nodemgr/internal/drivers/provision"
)

// Shell completion of what commands name: the nodes, suites, pools,
// templates, ensembles and deployments the server knows, and the values
// of enum flags, as kubectl completes its resources. Each command gets
// them from the placeholder its Use names (NODE, SUITE, ...), so a new
// command completes without a line of its own.

// lister lists the names of one kind of thing from the server.
type lister func(ctx context.Context, cmd *cobra.Command, e *env) ([]string, error)

func listNodes(ctx context.Context, cmd *cobra.Command, e *env) ([]string, error) {
	ns, err := clientFor(cmd, e).Nodes(ctx, "")
	return names(ns, func(n api.Node) string { return n.Name }), err
}

func listSuites(ctx context.Context, cmd *cobra.Command, e *env) ([]string, error) {
	ss, err := clientFor(cmd, e).Suites(ctx, "")
	return names(ss, func(s api.Suite) string { return s.Name }), err
}

func listPools(ctx context.Context, cmd *cobra.Command, e *env) ([]string, error) {
	ps, err := clientFor(cmd, e).Pools(ctx)
	return names(ps, func(p api.Pool) string { return p.Spec.Name }), err
}

func listTemplates(ctx context.Context, cmd *cobra.Command, e *env) ([]string, error) {
	ds, err := clientFor(cmd, e).Documents(ctx, "templates")
	return names(ds, func(d api.Document) string { return d.Name }), err
}

func listEnsembles(ctx context.Context, cmd *cobra.Command, e *env) ([]string, error) {
	es, err := clientFor(cmd, e).Ensembles(ctx, false)
	return names(es, func(x api.Ensemble) string { return x.Spec.Name }), err
}

func listDeployments(ctx context.Context, cmd *cobra.Command, e *env) ([]string, error) {
	ds, err := clientFor(cmd, e).Deployments(ctx, "")
	return names(ds, func(d api.Deployment) string { return d.Name }), err
}

func names[T any](items []T, name func(T) string) []string {
	out := make([]string, 0, len(items))
	for _, it := range items {
		out = append(out, name(it))
	}
	return out
}

// argListers maps the placeholder of a command's first argument to what
// completes it; NAME and ID take their meaning from the command's parent.
var argListers = map[string]lister{
	"NODE": listNodes, "SUITE": listSuites, "POOL": listPools, "TEMPLATE": listTemplates,
	"ENSEMBLE": listEnsembles, "DEPLOYMENT": listDeployments,
}

var parentListers = map[string]lister{
	"pool": listPools, "template": listTemplates, "ensemble": listEnsembles, "suite": listSuites,
}

// flagValues are the fixed values of enum flags, by command and flag; a
// command "" stands for any.
var flagValues = map[[2]string]func() []string{
	{"suite ls", "state"}: func() []string {
		return []string{api.SuiteOpen, api.SuiteClosed, api.SuiteComplete, api.SuiteCancelled}
	},
	{"task ls", "state"}: func() []string {
		return []string{api.TaskPending, api.TaskReady, api.TaskRunning, api.TaskFinished, api.TaskFailed, api.TaskCancelled}
	},
	{"node ls", "status"}:         func() []string { return []string{api.StatusOnline, api.StatusSuspect, api.StatusOffline} },
	{"", "provider"}:              provision.Names,
	{"schedule", "policy"}:        func() []string { return schedule.Policies },
	{"ensemble deploy", "policy"}: func() []string { return []string{"binpack", "spread"} },
	{"task logs", "stream"}:       func() []string { return []string{"stdout", "stderr", "all"} },
}

// flagListers complete flags that name a thing on the server.
var flagListers = map[string]lister{"suite": listSuites, "template": listTemplates, "pool": listPools, "node": listNodes}

// addCompletions gives every command below root the completions its
// arguments and flags call for.
func addCompletions(root *cobra.Command, e *env) {
	var walk func(cmd *cobra.Command)
	walk = func(cmd *cobra.Command) {
		if l := argLister(cmd); l != nil && cmd.ValidArgsFunction == nil {
			cmd.ValidArgsFunction = func(cmd *cobra.Command, args []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
				if len(args) > 0 {
					return nil, cobra.ShellCompDirectiveNoFileComp
				}
				return complete(cmd, e, l)
			}
		}
		path := strings.TrimPrefix(cmd.CommandPath(), root.Name()+" ")
		cmd.LocalNonPersistentFlags().VisitAll(func(f *pflag.Flag) {
			if values := flagValuesFor(path, f.Name); values != nil {
				cmd.RegisterFlagCompletionFunc(f.Name, cobra.FixedCompletions(values(), cobra.ShellCompDirectiveNoFileComp))
			} else if l := flagListers[f.Name]; l != nil {
				cmd.RegisterFlagCompletionFunc(f.Name, func(cmd *cobra.Command, _ []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
					return complete(cmd, e, l)
				})
			}
		})
		for _, sub := range cmd.Commands() {
			walk(sub)
		}
	}
	walk(root)
}

// argLister is what completes cmd's first argument, from its Use.
func argLister(cmd *cobra.Command) lister {
	fields := strings.Fields(cmd.Use)
	if len(fields) < 2 {
		return nil
	}
	arg := strings.Trim(fields[1], "[]")
	if l := argListers[arg]; l != nil {
		return l
	}
	if arg == "NAME" && cmd.HasParent() {
		return parentListers[cmd.Parent().Name()]
	}
	return nil
}

func flagValuesFor(path, flag string) func() []string {
	if v := flagValues[[2]string{path, flag}]; v != nil {
		return v
	}
	return flagValues[[2]string{"", flag}]
}

// complete asks the server, briefly: a shell waits for the answer.
func complete(cmd *cobra.Command, e *env, l lister) ([]cobra.Completion, cobra.ShellCompDirective) {
	parent := cmd.Context()
	if parent == nil {
		parent = context.Background()
	}
	ctx, cancel := context.WithTimeout(parent, 3*time.Second)
	defer cancel()
	names, err := l(ctx, cmd, e)
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveError
	}
	return names, cobra.ShellCompDirectiveNoFileComp
}
