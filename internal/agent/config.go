package agent

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/nodemgr/nodemgr/internal/errdefs"
	"github.com/nodemgr/nodemgr/internal/validate"
)

// Config is the agent's configuration: a YAML file, overridden by NODEMGR_*
// environment variables, overridden by flags (the CLI applies them in that
// order).
type Config struct {
	Server        string            `yaml:"server"`          // coordinator URL, e.g. http://10.0.0.1:7070
	DataDir       string            `yaml:"data_dir"`        // state, lock, credential
	JoinToken     string            `yaml:"join_token"`      // needed only to register
	JoinTokenFile string            `yaml:"join_token_file"` // alternative to join_token
	Name          string            `yaml:"name"`            // default: hostname
	Tags          []string          `yaml:"tags"`
	Labels        map[string]string `yaml:"labels"`
	Groups        []string          `yaml:"groups"`

	// HeartbeatInterval overrides the interval the server asks for.
	HeartbeatInterval time.Duration `yaml:"heartbeat_interval"`
	ReconnectMin      time.Duration `yaml:"reconnect_min"`  // default 1s
	ReconnectMax      time.Duration `yaml:"reconnect_max"`  // default 60s
	ShutdownGrace     time.Duration `yaml:"shutdown_grace"` // default 30s
	Version           string        `yaml:"-"`
}

// LoadConfigFile reads a YAML config file. Unknown keys are errors that name
// the line, so typos do not pass silently.
func LoadConfigFile(path string) (Config, error) {
	var c Config
	b, err := os.ReadFile(path)
	if err != nil {
		return c, fmt.Errorf("read agent config: %w", err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil && !errors.Is(err, io.EOF) {
		return c, fmt.Errorf("agent config %s: %w", path, errdefs.Field("config", "%v", err))
	}
	return c, nil
}

// ApplyEnv overrides c with the NODEMGR_* variables that are set: SERVER,
// DATA_DIR, JOIN_TOKEN, NAME, TAGS (comma-separated), LABELS (k=v,k=v),
// GROUPS (comma-separated).
func (c *Config) ApplyEnv(getenv func(string) string) error {
	if v := getenv("NODEMGR_SERVER"); v != "" {
		c.Server = v
	}
	if v := getenv("NODEMGR_DATA_DIR"); v != "" {
		c.DataDir = v
	}
	if v := getenv("NODEMGR_JOIN_TOKEN"); v != "" {
		c.JoinToken = v
	}
	if v := getenv("NODEMGR_NAME"); v != "" {
		c.Name = v
	}
	if v := getenv("NODEMGR_TAGS"); v != "" {
		c.Tags = SplitList(v)
	}
	if v := getenv("NODEMGR_GROUPS"); v != "" {
		c.Groups = SplitList(v)
	}
	if v := getenv("NODEMGR_LABELS"); v != "" {
		labels, err := ParseLabels("NODEMGR_LABELS", SplitList(v))
		if err != nil {
			return err
		}
		c.Labels = labels
	}
	return nil
}

// SplitList splits a comma-separated list, dropping empty items.
func SplitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// ParseLabels turns ["k=v", ...] into a map.
func ParseLabels(field string, kvs []string) (map[string]string, error) {
	out := map[string]string{}
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return nil, errdefs.Field(field, "label %q must look like key=value", kv)
		}
		out[k] = v
	}
	return out, nil
}

// setDefaults fills what was left empty and makes paths absolute.
func (c *Config) setDefaults() error {
	if c.DataDir == "" {
		c.DataDir = "/var/lib/nodemgr/agent"
	}
	abs, err := filepath.Abs(c.DataDir)
	if err != nil {
		return errdefs.Field("data_dir", "%v", err)
	}
	c.DataDir = filepath.Clean(abs)
	if c.Name == "" {
		h, _ := os.Hostname()
		c.Name = h
	}
	if c.ReconnectMin == 0 {
		c.ReconnectMin = time.Second
	}
	if c.ReconnectMax == 0 {
		c.ReconnectMax = 60 * time.Second
	}
	if c.ShutdownGrace == 0 {
		c.ShutdownGrace = 30 * time.Second
	}
	if c.Version == "" {
		c.Version = "dev"
	}
	if c.JoinToken == "" && c.JoinTokenFile != "" {
		b, err := os.ReadFile(c.JoinTokenFile)
		if err != nil {
			return errdefs.Field("join_token_file", "%v", err)
		}
		c.JoinToken = strings.TrimSpace(string(b))
	}
	return nil
}

// validate checks the config and names the field at fault.
func (c *Config) validate() error {
	if c.Server == "" {
		return errdefs.Field("server", "required: the coordinator URL, e.g. http://127.0.0.1:7070 (--server or NODEMGR_SERVER)")
	}
	u, err := url.Parse(c.Server)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return errdefs.Field("server", "must be an http:// or https:// URL, got %q", c.Server)
	}
	if err := validate.Name("name", c.Name); err != nil {
		return err
	}
	if err := validate.Tags("tags", c.Tags); err != nil {
		return err
	}
	if err := validate.Labels("labels", c.Labels); err != nil {
		return err
	}
	if err := validate.Groups("groups", c.Groups); err != nil {
		return err
	}
	if c.HeartbeatInterval < 0 {
		return errdefs.Field("heartbeat_interval", "must not be negative")
	}
	if c.ReconnectMin <= 0 || c.ReconnectMax < c.ReconnectMin {
		return errdefs.Field("reconnect_max", "must be at least reconnect_min (%s), got %s", c.ReconnectMin, c.ReconnectMax)
	}
	return nil
}
