//go:build !clientonly

package cli

import (
	"fmt"
	"io"
	"os"
	"reflect"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"

	"github.com/nodemgr/nodemgr/internal/base/yamlfield"
	"github.com/nodemgr/nodemgr/internal/node/agent"
)

// The daemons' settings come in four layers, each overriding the one
// before: the default, the config file (--config), an environment
// variable, a flag. The file's key is the flag's name with '_' for '-'
// (data-dir: data_dir); the variable is a prefix and the key in upper case:
// NODEMGR_SERVER_DATA_DIR for the server, NODEMGR_DATA_DIR for the agent
// (its prefix is older than the server's config file).

// source says which layer a setting's value came from.
type source string

const (
	fromDefault source = "default"
	fromFile    source = "file"
	fromEnv     source = "env"
	fromFlag    source = "flag"
)

// serverEnvPrefix starts the server's variables.
const serverEnvPrefix = "NODEMGR_SERVER_"

// notSettings are server flags that are actions, not settings: they stay
// off the config file and --print-config.
var notSettings = map[string]bool{"help": true, "config": true, "print-config": true, "reset-admin-token": true}

// flagSetting is a setting backed by a flag: the server's.
type flagSetting struct {
	key, env string
	flag     *pflag.Flag
	from     source
}

// serverSettings lists the server command's settings: its own flags and
// the daemons' logging flags, in the order --help shows them.
func serverSettings(cmd *cobra.Command) []*flagSetting {
	var out []*flagSetting
	add := func(f *pflag.Flag) {
		if notSettings[f.Name] {
			return
		}
		key := strings.ReplaceAll(f.Name, "-", "_")
		out = append(out, &flagSetting{key: key, env: serverEnvPrefix + strings.ToUpper(key), flag: f, from: fromDefault})
	}
	cmd.LocalNonPersistentFlags().VisitAll(add)
	for _, name := range []string{"log-level", "log-format"} {
		if f := cmd.InheritedFlags().Lookup(name); f != nil {
			add(f)
		}
	}
	return out
}

// applyServerSettings sets the server's flags that were not given from
// the environment, then from the config file, and records where each
// value came from.
func applyServerSettings(cmd *cobra.Command, e *env) ([]*flagSetting, error) {
	settings := serverSettings(cmd)
	path, _ := cmd.Flags().GetString("config")
	file, err := readServerFile(path, settings)
	if err != nil {
		return nil, err
	}
	for _, s := range settings {
		switch {
		case s.flag.Changed:
			s.from = fromFlag
		case e.getenv(s.env) != "":
			if err := s.flag.Value.Set(e.getenv(s.env)); err != nil {
				return nil, fmt.Errorf("%s: %v; fix or unset the variable", s.env, err)
			}
			s.from = fromEnv
		case file[s.key] != nil:
			if err := file[s.key](s.flag.Value); err != nil {
				return nil, err
			}
			s.from = fromFile
		}
	}
	return settings, nil
}

// fileValue sets a flag's value from the config file.
type fileValue func(pflag.Value) error

// readServerFile reads the server's config file strictly: an unknown key
// is an error at FILE:LINE:COL naming it (and the nearest known one), as
// for the agent's file. It returns a setter per key in the file.
func readServerFile(path string, settings []*flagSetting) (map[string]fileValue, error) {
	out := map[string]fileValue{}
	if path == "" {
		return out, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read server config: %w", err)
	}
	doc, err := yamlfield.Load(b, path)
	if err != nil || doc.Root == nil {
		return out, err
	}
	byKey := map[string]*flagSetting{}
	var known []string
	for _, s := range settings {
		byKey[s.key] = s
		known = append(known, s.key)
	}
	err = doc.Mapping(doc.Root, "", func(key, field string, k, v *yaml.Node) error {
		s := byKey[key]
		if s == nil {
			hint := "; `nodemgr server --print-config` lists the settings"
			if near := yamlfield.Suggest(key, known); near != "" {
				hint = "; did you mean " + near + "?"
			}
			return doc.Errorf(k, field, "unknown setting%s", hint)
		}
		set, err := fileSetter(doc, field, v, s.flag.Value)
		if err != nil {
			return err
		}
		out[key] = set
		return nil
	})
	return out, err
}

// fileSetter reads one value of the file: a list for a list flag (or one
// item), else a single value, set through the flag's own parser so that
// the file accepts what the flag does.
func fileSetter(doc *yamlfield.Doc, field string, v *yaml.Node, fv pflag.Value) (fileValue, error) {
	if sv, ok := fv.(pflag.SliceValue); ok && v.Kind == yaml.SequenceNode {
		var items []string
		err := doc.Sequence(v, field, func(_ int, f string, item *yaml.Node) error {
			s, err := doc.Scalar(item, f)
			items = append(items, s)
			return err
		})
		if err != nil {
			return nil, err
		}
		return func(pflag.Value) error { return sv.Replace(items) }, nil
	}
	text, err := doc.String(v, field)
	if err != nil {
		return nil, err
	}
	return func(fv pflag.Value) error {
		if err := fv.Set(text); err != nil {
			return doc.Errorf(v, field, "%v", err)
		}
		return nil
	}, nil
}

// printedSetting is one line of --print-config.
type printedSetting struct {
	key, value string
	from       source
	via        string // the variable or flag that set it
}

// printSettings writes the settings in effect as YAML, each with its
// source in a comment: output a person reads, and could edit into a
// config file (secrets show as <redacted>).
func printSettings(w io.Writer, daemon string, lines []printedSetting) {
	fmt.Fprintf(w, "# nodemgr %s settings in effect (flag > env > file > default)\n", daemon)
	width := 0
	for _, l := range lines {
		width = max(width, len(l.key)+len(l.value)+2)
	}
	for _, l := range lines {
		kv := l.key + ": " + l.value
		note := string(l.from)
		if l.via != "" {
			note += " " + l.via
		}
		fmt.Fprintf(w, "%-*s  # %s\n", width, kv, note)
	}
}

// serverPrinted turns the server's settings into --print-config lines.
func serverPrinted(settings []*flagSetting, configPath string) []printedSetting {
	var out []printedSetting
	for _, s := range settings {
		p := printedSetting{key: s.key, value: flagYAML(s.flag.Value, dbSettings[s.key]), from: s.from}
		switch s.from {
		case fromEnv:
			p.via = s.env
		case fromFlag:
			p.via = "--" + s.flag.Name
		case fromFile:
			p.via = configPath
		}
		out = append(out, p)
	}
	return out
}

// dbSettings are the server's settings that may hold a database URL or
// connection string, and so a password.
var dbSettings = map[string]bool{"db": true, "db_listen_url": true}

// flagYAML is a flag's value as YAML: a list for a list flag, a quoted
// string where YAML needs one, numbers, booleans and durations as they
// are. A database URL's passwords (in --db, --db-listen-url) are redacted.
func flagYAML(v pflag.Value, isURL bool) string {
	if sv, ok := v.(pflag.SliceValue); ok {
		return yamlList(sv.GetSlice())
	}
	if v.Type() != "string" {
		return v.String()
	}
	s := v.String()
	if isURL {
		s = redactURL(s)
	}
	return yamlString(s)
}

// yamlString quotes s only where YAML would read it otherwise.
func yamlString(s string) string {
	b, err := yaml.Marshal(s)
	if err != nil {
		return fmt.Sprintf("%q", s)
	}
	return strings.TrimSuffix(string(b), "\n")
}

func yamlList(items []string) string {
	quoted := make([]string, len(items))
	for i, s := range items {
		quoted[i] = yamlString(s)
	}
	return "[" + strings.Join(quoted, ", ") + "]"
}

// yamlFlow is any value as one line of YAML (flow style), durations as
// Go writes them (30s), which is how the config files take them.
func yamlFlow(v any) string {
	switch x := v.(type) {
	case time.Duration:
		return x.String()
	case string:
		return yamlString(x)
	case []string:
		return yamlList(x)
	case map[string]string:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = yamlString(k) + ": " + yamlString(x[k])
		}
		return "{" + strings.Join(parts, ", ") + "}"
	}
	if rv := reflect.ValueOf(v); rv.Kind() == reflect.Pointer && rv.IsNil() {
		return "null"
	}
	var n yaml.Node
	if err := n.Encode(v); err != nil {
		return fmt.Sprint(v)
	}
	flowStyle(&n)
	b, err := yaml.Marshal(&n)
	if err != nil {
		return fmt.Sprint(v)
	}
	return strings.TrimSuffix(string(b), "\n")
}

func flowStyle(n *yaml.Node) {
	if n.Kind == yaml.MappingNode || n.Kind == yaml.SequenceNode {
		n.Style = yaml.FlowStyle
	}
	for _, c := range n.Content {
		flowStyle(c)
	}
}

// agentFlagFor is the agent's flag for a config key, where it has one.
func agentFlagFor(fs *pflag.FlagSet, key string) *pflag.Flag {
	name := strings.ReplaceAll(key, "_", "-")
	switch key {
	case "tags", "labels", "groups", "depots":
		name = strings.TrimSuffix(name, "s")
	}
	return fs.Lookup(name)
}

// agentPrinted turns the agent's merged config into --print-config
// lines: the source of each key is the last layer that named it.
func agentPrinted(cmd *cobra.Command, e *env, cfg agent.Config) ([]printedSetting, error) {
	path, _ := cmd.Flags().GetString("config")
	inFile, err := fileKeys(path)
	if err != nil {
		return nil, err
	}
	var out []printedSetting
	for _, s := range cfg.Settings() {
		p := printedSetting{key: s.Key, value: yamlFlow(s.Value), from: fromDefault}
		if s.Secret && s.Value != "" {
			p.value = "<redacted>"
		}
		if f := agentFlagFor(cmd.Flags(), s.Key); f != nil && f.Changed {
			p.from, p.via = fromFlag, "--"+f.Name
		} else if name := agent.EnvName(s.Key); e.getenv(name) != "" {
			p.from, p.via = fromEnv, name
		} else if inFile[s.Key] {
			p.from, p.via = fromFile, path
		}
		out = append(out, p)
	}
	return out, nil
}

// fileKeys lists the top-level keys of a config file (already read
// strictly by the agent's loader).
func fileKeys(path string) (map[string]bool, error) {
	keys := map[string]bool{}
	if path == "" {
		return keys, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	doc, err := yamlfield.Load(b, path)
	if err != nil || doc.Root == nil {
		return keys, err
	}
	err = doc.Mapping(doc.Root, "", func(key, _ string, _, _ *yaml.Node) error {
		keys[key] = true
		return nil
	})
	return keys, err
}

// ConfigTemplate is the config file the Debian package installs for
// daemon ("server" or "agent"): every setting, commented out at its
// default, with what it does, its flag and its variable. It is made from
// the same tables as --print-config, so it cannot drift from the code.
func ConfigTemplate(daemon string) ([]byte, error) {
	e := &env{stdout: io.Discard, stderr: io.Discard, getenv: func(string) string { return "" }}
	cmd, _, err := newRoot(e).Find([]string{daemon})
	if err != nil || cmd.Name() != daemon {
		return nil, fmt.Errorf("config template: no daemon %q; want server or agent", daemon)
	}
	var b strings.Builder
	fmt.Fprintf(&b, `# /etc/nodemgr/%s.yaml: settings of nodemgr %s.
#
# Every setting is listed, commented out at its default: uncomment a line to
# change it. Environment variables override this file and flags override
# both; `+"`nodemgr %s --print-config`"+` shows the settings in effect and
# where each came from. Durations need a unit (30s, 5m, 720h).
`, daemon, daemon, daemon)
	switch daemon {
	case "server":
		for _, s := range serverSettings(cmd) {
			entry(&b, s.flag.Usage, "--"+s.flag.Name+", "+s.env, s.key, defaultYAML(s.flag))
		}
	case "agent":
		if err := agentTemplate(&b, cmd); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("config template: %s is not a daemon; want server or agent", daemon)
	}
	return []byte(b.String()), nil
}

// entry writes one commented setting of a config template.
func entry(b *strings.Builder, usage, names, key, value string) {
	b.WriteString("\n")
	for _, line := range wrap(usage, 76) {
		b.WriteString("# " + line + "\n")
	}
	b.WriteString("#   (" + names + ")\n")
	b.WriteString("#" + key + ": " + value + "\n")
}

// agentTemplate writes the agent's settings: its keys with their
// defaults, described by their flag's help or, for keys only the file
// sets, by fileOnlyUsage.
func agentTemplate(b *strings.Builder, cmd *cobra.Command) error {
	defaults, err := agent.Config{}.WithDefaults()
	if err != nil {
		return err
	}
	defaults.Name = "" // the hostname of whoever builds the package is no default
	for _, s := range defaults.Settings() {
		usage, names := fileOnlyUsage[s.Key], agent.EnvName(s.Key)
		if f := agentFlagFor(cmd.Flags(), s.Key); f != nil {
			usage, names = f.Usage, "--"+f.Name+", "+names
		}
		if usage == "" {
			return fmt.Errorf("config template: agent setting %s has no description; add it to fileOnlyUsage", s.Key)
		}
		if s.Key == "container_defaults" {
			names = "file only"
		}
		entry(b, usage, names, s.Key, yamlFlow(s.Value))
	}
	return nil
}

// fileOnlyUsage describes the agent's keys that have no flag.
var fileOnlyUsage = map[string]string{
	"blob_cache_max":     "bytes of task input files the agent caches (DATA_DIR/blobs); the least recently used go first",
	"onboard_share":      "percent (10-90) of the machine the node offers to containers and services when it first starts; negative leaves it to nodemgr node onboard",
	"task_user":          "who suite tasks, hooks and services that name no user run as: an existing user, not root (default nodemgr-task, made when missing, else nobody)",
	"container_defaults": "cpus and memory_mb a container job gets when it names none, e.g. {cpus: 0.5, memory_mb: 256} (unset: those); 0 makes jobs name their own",
}

// defaultYAML is a flag's default as YAML.
func defaultYAML(f *pflag.Flag) string {
	switch {
	case f.Value.Type() == "string":
		return yamlString(f.DefValue)
	case strings.HasSuffix(f.Value.Type(), "Slice"):
		return "[]"
	}
	return f.DefValue
}

// wrap breaks text into lines of at most width bytes at spaces.
func wrap(text string, width int) []string {
	var lines []string
	line := ""
	for _, w := range strings.Fields(text) {
		if line != "" && len(line)+1+len(w) > width {
			lines = append(lines, line)
			line = ""
		}
		if line != "" {
			line += " "
		}
		line += w
	}
	return append(lines, line)
}
