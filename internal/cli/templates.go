//go:build !agentonly

package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/client"
	"github.com/nodemgr/nodemgr/internal/coordinator/template"
	"github.com/nodemgr/nodemgr/internal/drivers/mapping"
)

// docKind describes one kind of stored YAML document for the shared verbs.
type docKind struct {
	name, plural string
	// parse checks a file locally and returns the name it declares ("" if
	// the kind's files carry no name).
	parse func(data []byte, source string) (string, error)
}

var (
	templateKind = docKind{"template", "templates", func(b []byte, src string) (string, error) {
		t, err := template.Parse(b, src)
		return t.Name, err
	}}
	mappingKind = docKind{"mapping", "mappings", func(b []byte, src string) (string, error) {
		_, err := mapping.Parse(b, src)
		return "", err
	}}
)

func newTemplateCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{Use: "template", Short: "Provider-independent machine templates",
		Long: `Templates describe a machine once for every provider (seed 000's format):

  name: ubuntu-worker-small
  cpu: 2
  memoryMB: 256
  image: ubuntu:24.04
  user: ubuntu
  overrides:
    docker: {env: ["FOO=bar"]}
    libvirt: {memoryMB: 1024, diskGB: 3, network: default}

render shows the flat Extra map a provider gets: template fields, then
overrides.all, then overrides.<provider>, then the mapping sets.`}
	cmd.AddCommand(docApplyCmd(e, templateKind), docLsCmd(e, templateKind), docShowCmd(e, templateKind),
		docRmCmd(e, templateKind), docValidateCmd(e, templateKind), templateRenderCmd(e))
	return cmd
}

func newMappingCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{Use: "mapping", Short: "Map generic resources (images) to each provider's own",
		Long: `A mapping set is a list of rules (seed 000's format):

  mapping:
    - match:
        image: "ubuntu:24.04"
        match_type: "glob"        # glob | exact
      overrides:
        all: {user: "ubuntu"}
        docker: {image: "ubuntu:24.04"}

Every match key must match the rendered template (exactly, or as a glob);
a matching rule applies its all overrides, then the provider's. Rules repeat
until nothing changes, and a set whose rules would feed each other forever is
refused. All stored sets apply, in name order.`}
	cmd.AddCommand(docApplyCmd(e, mappingKind), docLsCmd(e, mappingKind), docShowCmd(e, mappingKind),
		docRmCmd(e, mappingKind), docValidateCmd(e, mappingKind))
	return cmd
}

func docApplyCmd(e *env, k docKind) *cobra.Command {
	var file, name string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "apply -f FILE",
		Short: "Create or replace a " + k.name + " from a YAML file",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			b, err := readSpec(file, "give the "+k.name+" file with -f FILE", readFileOrStdin)
			if err != nil {
				return err
			}
			declared, err := k.parse(b, file)
			if err != nil {
				return err
			}
			if name == "" {
				name = declared
			}
			if name == "" {
				name = strings.TrimSuffix(filepath.Base(file), filepath.Ext(file))
			}
			d, err := clientFor(cmd, e).PutDocument(cmd.Context(), k.plural, name, b)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(e.stdout, d)
			}
			verb := "updated"
			if d.Version == 1 {
				verb = "created"
			}
			fmt.Fprintf(e.stdout, "%s %s %s (version %d)\n", verb, k.name, d.Name, d.Version)
			return nil
		},
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", "YAML file (- for standard input)")
	if k.name == "mapping" {
		cmd.Flags().StringVar(&name, "name", "", "name of the mapping set (default: the file's base name)")
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func docLsCmd(e *env, k docKind) *cobra.Command {
	cmd := &cobra.Command{Use: "ls", Short: "List " + k.plural, Args: cobra.NoArgs}
	return lsCmd(e, cmd, "all",
		func(c *client.Client, ctx context.Context, p client.Page) (api.DocumentList, error) {
			return c.DocumentsPage(ctx, k.plural, p)
		},
		func(docs []api.Document, next string) any { return api.DocumentPage(k.plural, docs, next) },
		func(e *env, docs []api.Document) error {
			t := newTable(e.stdout, "NAME", "VERSION", "UPDATED", "SUMMARY")
			for _, d := range docs {
				t.row(d.Name, strconv.Itoa(d.Version), d.UpdatedAt.Format(time.RFC3339), docSummary(k, d))
			}
			return t.flush()
		})
}

func docSummary(k docKind, d api.Document) string {
	if k.name == "mapping" {
		var rules []any
		json.Unmarshal(d.Parsed, &rules)
		return fmt.Sprintf("%d rules", len(rules))
	}
	var t template.Template
	json.Unmarshal(d.Parsed, &t)
	providers := slices.Sorted(maps.Keys(t.Overrides))
	return fmt.Sprintf("%s, %d cpu, %d MB; overrides: %s", orDash(t.Image), t.CPU, t.MemoryMB, orDash(strings.Join(providers, ",")))
}

func docShowCmd(e *env, k docKind) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use: "show NAME", Short: "Show a " + k.name + " as written", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			d, err := clientFor(cmd, e).Document(cmd.Context(), k.plural, args[0])
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(e.stdout, d)
			}
			fmt.Fprintf(e.stdout, "# %s %s, version %d, updated %s\n%s", k.name, d.Name, d.Version, d.UpdatedAt.Format(time.RFC3339), d.YAML)
			if !strings.HasSuffix(d.YAML, "\n") {
				fmt.Fprintln(e.stdout)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON (the YAML and its parsed form)")
	return cmd
}

func docRmCmd(e *env, k docKind) *cobra.Command {
	return &cobra.Command{
		Use: "rm NAME", Short: "Remove a " + k.name, Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := clientFor(cmd, e).DeleteDocument(cmd.Context(), k.plural, args[0]); err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "removed %s %s\n", k.name, args[0])
			return nil
		},
	}
}

func docValidateCmd(e *env, k docKind) *cobra.Command {
	return &cobra.Command{
		Use:   "validate FILE",
		Short: "Check a " + k.name + " file without storing it (no server needed)",
		Long:  "Check a " + k.name + " file without storing it. It exits non-zero and prints FILE:LINE:COLUMN, the field and the reason on the first error.",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			b, err := readFileOrStdin(args[0])
			if err != nil {
				return err
			}
			if _, err := k.parse(b, args[0]); err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "%s: valid %s\n", args[0], k.name)
			return nil
		},
	}
}

func templateRenderCmd(e *env) *cobra.Command {
	var provider string
	var asJSON, explain bool
	cmd := &cobra.Command{
		Use:   "render NAME --provider PROVIDER",
		Short: "Print the flat Extra map a provider gets for a template",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if provider == "" {
				return usagef("--provider is required: %s", providerList())
			}
			r, err := clientFor(cmd, e).Render(cmd.Context(), args[0], provider)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(e.stdout, r)
			}
			t := newTable(e.stdout, "KEY", "VALUE", "SET BY")
			setBy := map[string]string{}
			for _, st := range r.Steps {
				setBy[st.Key] = st.Layer
			}
			for _, key := range slices.Sorted(maps.Keys(r.Extra)) {
				v, _ := json.Marshal(r.Extra[key])
				t.row(key, string(v), setBy[key])
			}
			t.flush()
			if explain {
				fmt.Fprintf(e.stdout, "\nsteps (mapping sets: %s):\n", orDash(strings.Join(r.Mappings, ", ")))
				for _, st := range r.Steps {
					fmt.Fprintln(e.stdout, "  "+st.Text)
				}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&provider, "provider", "", providerList())
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON: extra, steps and the mapping sets applied")
	cmd.Flags().BoolVar(&explain, "explain", false, "also list every step, layer by layer")
	return cmd
}
