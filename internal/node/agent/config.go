package agent

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/nodemgr/nodemgr/internal/base/auth"
	"github.com/nodemgr/nodemgr/internal/base/cleartext"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/base/imds"
	"github.com/nodemgr/nodemgr/internal/base/validate"
	"github.com/nodemgr/nodemgr/internal/base/workload"
	"github.com/nodemgr/nodemgr/internal/base/yamlfield"
	"github.com/nodemgr/nodemgr/internal/node/container"
	"github.com/nodemgr/nodemgr/internal/node/portalloc"
)

// Config is the agent's configuration: a YAML file, overridden by NODEMGR_*
// environment variables, overridden by flags (the CLI applies them in that
// order).
type Config struct {
	// Server is the coordinator's URL, e.g. https://10.0.0.1:7070, or
	// several replicas' URLs separated by commas: the agent fails over
	// among them, in order, with its usual backoff.
	Server string `yaml:"server"`
	// Servers is Server split at its commas (set by validate).
	Servers       []string          `yaml:"-"`
	DataDir       string            `yaml:"data_dir"`        // state, lock, credential
	JoinToken     string            `yaml:"join_token"`      // needed only to register
	JoinTokenFile string            `yaml:"join_token_file"` // alternative to join_token
	Name          string            `yaml:"name"`            // default: hostname
	Tags          []string          `yaml:"tags"`
	Labels        map[string]string `yaml:"labels"`
	Groups        []string          `yaml:"groups"`

	// ServerCA is a PEM file of the CA to verify the server by. Without
	// it the agent trusts the CA whose fingerprint the join token carries
	// (and keeps it in the data dir, server-ca.crt), else the system's roots.
	ServerCA string `yaml:"server_ca"`
	// InsecureHTTP lets the agent send its join token and node credential
	// to a plain http:// server beyond loopback, where anyone on the path
	// can read them. Without it such a server is refused at start.
	InsecureHTTP bool `yaml:"insecure_http"`
	// SameCoordinator says the server is the coordinator the saved state
	// was made with, whatever URL it had then: the agent keeps its
	// credential when the URL changed. nodemgr dev sets it (its server and
	// agent share a data dir); a real agent reaching a new URL registers
	// afresh, since a credential is good only where it was issued.
	SameCoordinator bool `yaml:"-"`

	// HeartbeatInterval overrides the interval the server asks for.
	HeartbeatInterval time.Duration `yaml:"heartbeat_interval"`
	// Keepalive is how often the agent pings the server on its
	// connection; a ping unanswered for two periods means the server is
	// frozen or cut off, and the agent moves to the next --server.
	// Default 2s.
	Keepalive     time.Duration `yaml:"keepalive"`
	ReconnectMin  time.Duration `yaml:"reconnect_min"`  // default 1s
	ReconnectMax  time.Duration `yaml:"reconnect_max"`  // default 60s
	ShutdownGrace time.Duration `yaml:"shutdown_grace"` // default 30s
	// BlobCacheMax caps the cache of task input files (DATA_DIR/blobs),
	// in bytes; the least recently used go first. Default 10 GiB.
	BlobCacheMax int64  `yaml:"blob_cache_max"`
	Version      string `yaml:"-"`

	// Standalone runs without a server: only the local API manages the
	// node (nodee on its own).
	Standalone bool `yaml:"standalone"`
	// Prefix holds the software and runtime trees (nodee's /prefix);
	// default <data_dir>.
	Prefix string `yaml:"prefix"`
	// Depots maps an artifact group to the base URL of its depot.
	Depots map[string]string `yaml:"depots"`
	// LocalAPISocket is the unix socket of the local API (mode 0600);
	// default <data_dir>/agent.sock.
	LocalAPISocket string `yaml:"local_api_socket"`
	// LocalAPIListen also serves the local API on TCP (host:port); it then
	// needs LocalAPIToken, sent as "Authorization: Bearer <token>".
	LocalAPIListen    string `yaml:"local_api_listen"`
	LocalAPIToken     string `yaml:"local_api_token"`
	LocalAPITokenFile string `yaml:"local_api_token_file"` // alternative to local_api_token
	// DockerHost is the engine containers run on (DOCKER_HOST style;
	// default $DOCKER_HOST, else the local socket).
	DockerHost string `yaml:"docker_host"`
	// ContainerHostIP is the address containers' host ports bind to;
	// default all addresses.
	ContainerHostIP string `yaml:"container_host_ip"`
	// ContainerUsageInterval is how often running containers' CPU and
	// memory are sampled and reported (default 10s).
	ContainerUsageInterval time.Duration `yaml:"container_usage_interval"`
	// ContainerDefaults are the cpus and memory_mb a container job gets
	// when it names none, booked and enforced by the engine alike; unset:
	// 0.5 cores and 256 MiB. A limit set to 0 here has no default: a job
	// must give it.
	ContainerDefaults *container.Defaults `yaml:"container_defaults"`
	// OnboardShare is the share (10-90 %) of the machine a node offers to
	// containers and services when it first starts; default 90, negative
	// leaves it to `nodemgr node onboard`.
	OnboardShare int `yaml:"onboard_share"`
	// Procs is how many threads of Go code the agent runs (GOMAXPROCS).
	// The agent mostly moves frames between the server and its workers;
	// the cores are for the workloads. Default one per 8 cores, at least
	// one; the GOMAXPROCS variable, when set, wins.
	Procs int `yaml:"procs"`
	// TaskUser is who suite tasks, hooks and services that name no user
	// run as: an existing user, not root. Default runas.TaskUser (made
	// when missing), else nobody. A pool machine's bootstrap sets it to
	// the template's user when that user is not root, as the template
	// asks its code to run as that user.
	TaskUser string `yaml:"task_user"`
	// PortRange is the range the port allocator hands out, "min-max";
	// default 16384-65535.
	PortRange string `yaml:"port_range"`

	// IMDS is the endpoint of the machine's instance metadata service
	// (on EC2 http://169.254.169.254); set, the agent polls it for spot
	// interruption notices and rebalance recommendations, drains on an
	// interruption and tells the server of both. Empty: not on EC2, off.
	// The orchestrator sets it for the spot machines it makes.
	IMDS string `yaml:"imds"`
	// IMDSInterval is how often it is polled; default 5s.
	IMDSInterval time.Duration `yaml:"imds_interval"`

	// Overlay puts the node on the server's overlay network: a WireGuard
	// device (OverlayInterface) meshed with the nodes it shares a group
	// with. It needs CAP_NET_ADMIN and /dev/net/tun where the kernel has
	// no WireGuard.
	Overlay          bool   `yaml:"overlay"`
	OverlayInterface string `yaml:"overlay_interface"` // default nodemgr0
	OverlayPort      int    `yaml:"overlay_port"`      // UDP; default 51820
	// OverlayEndpoint is the ip:port peers send to, where the address the
	// server sees the agent connect from is not it (NAT, a proxy).
	OverlayEndpoint string `yaml:"overlay_endpoint"`
	// OverlayRelayAfter is how long a peer's endpoint may go without a
	// WireGuard handshake before its packets go through the server;
	// default 15s.
	OverlayRelayAfter time.Duration `yaml:"overlay_relay_after"`

	// openSecretFiles are secret files other users may read, to warn about.
	openSecretFiles []string
}

// LoadConfigFile reads a YAML config file strictly: an unknown key, a wrong
// type or a duration without a unit is an error at FILE:LINE:COL that names
// the key (and the nearest known one for a typo), so mistakes do not pass
// silently.
func LoadConfigFile(path string) (Config, error) {
	var c Config
	b, err := os.ReadFile(path)
	if err != nil {
		return c, fmt.Errorf("read agent config: %w", err)
	}
	if err := yamlfield.Unmarshal(b, path, &c); err != nil {
		return Config{}, err
	}
	return c, nil
}

// EnvName is the environment variable of a config file key: NODEMGR_ and
// the key in upper case (data_dir: NODEMGR_DATA_DIR). The server's
// settings follow the same rule under NODEMGR_SERVER_.
func EnvName(key string) string { return "NODEMGR_" + strings.ToUpper(key) }

// ApplyEnv overrides c with the variable (EnvName) of every key that is
// set: lists are comma-separated (NODEMGR_TAGS=a,b), maps k=v,k=v
// (NODEMGR_LABELS, NODEMGR_DEPOTS), durations with a unit. A secret's
// _FILE variable (NODEMGR_JOIN_TOKEN_FILE) beats its value from the
// file. container_defaults, a structure, is set in the file only.
func (c *Config) ApplyEnv(getenv func(string) string) error {
	envSecret(getenv, "NODEMGR_JOIN_TOKEN", &c.JoinToken, &c.JoinTokenFile)
	envSecret(getenv, "NODEMGR_LOCAL_API_TOKEN", &c.LocalAPIToken, &c.LocalAPITokenFile)
	rv := reflect.ValueOf(c).Elem()
	for _, k := range configKeys() {
		if secretEnv[k.key] {
			continue // done above
		}
		name := EnvName(k.key)
		v := getenv(name)
		if v == "" {
			continue
		}
		if err := setFromText(rv.FieldByIndex(k.index), name, v); err != nil {
			return err
		}
	}
	return nil
}

// secretEnv are the keys envSecret applies.
var secretEnv = map[string]bool{"join_token": true, "join_token_file": true, "local_api_token": true, "local_api_token_file": true}

// configKey is a key of the config file and the Config field it sets.
type configKey struct {
	key   string
	index []int
}

// configKeys lists the config file's keys in Config's order.
func configKeys() []configKey {
	t := reflect.TypeFor[Config]()
	var keys []configKey
	for i := range t.NumField() {
		f := t.Field(i)
		key, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if key == "" || key == "-" || !f.IsExported() {
			continue
		}
		keys = append(keys, configKey{key, f.Index})
	}
	return keys
}

// setFromText sets a field from an environment variable's text.
func setFromText(fv reflect.Value, name, text string) error {
	bad := func(want string) error { return errdefs.Field(name, "%q is not %s", text, want) }
	switch p := fv.Addr().Interface().(type) {
	case *string:
		*p = text
	case *bool:
		b, err := strconv.ParseBool(text)
		if err != nil {
			return bad("true or false")
		}
		*p = b
	case *int:
		n, err := strconv.Atoi(text)
		if err != nil {
			return bad("a whole number")
		}
		*p = n
	case *int64:
		n, err := strconv.ParseInt(text, 10, 64)
		if err != nil {
			return bad("a whole number")
		}
		*p = n
	case *time.Duration:
		d, err := time.ParseDuration(text)
		if err != nil {
			return bad("a duration with a unit, like 30s or 5m")
		}
		*p = d
	case *[]string:
		*p = SplitList(text)
	case *map[string]string:
		m, err := validate.KeyValues(name, SplitList(text))
		if err != nil {
			return err
		}
		*p = m
	default:
		return errdefs.Field(name, "is set in the config file only")
	}
	return nil
}

// Setting is one key of the config file with its value in a Config, for
// `nodemgr agent --print-config`.
type Setting struct {
	Key    string
	Value  any  // the field's value: string, bool, int, time.Duration, []string, map ...
	Secret bool // a token: print it redacted
}

// Settings lists c's keys and values in the config file's order.
func (c Config) Settings() []Setting {
	rv := reflect.ValueOf(c)
	var out []Setting
	for _, k := range configKeys() {
		secret := k.key == "join_token" || k.key == "local_api_token"
		out = append(out, Setting{Key: k.key, Value: rv.FieldByIndex(k.index).Interface(), Secret: secret})
	}
	return out
}

// WithDefaults is c with the defaults filled in as the agent will run
// with them, without reading secret files (which may not be readable by
// whoever asks).
func (c Config) WithDefaults() (Config, error) {
	err := c.fillDefaults()
	return c, err
}

// envSecret applies a secret's variable, or its _FILE variable, which
// then beats a value from the config file.
func envSecret(getenv func(string) string, name string, value, file *string) {
	if v := getenv(name + "_FILE"); v != "" {
		*value, *file = "", v
	}
	if v := getenv(name); v != "" {
		*value = v
	}
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

// setDefaults fills what was left empty, makes paths absolute and reads
// the secret files.
func (c *Config) setDefaults() error {
	if err := c.fillDefaults(); err != nil {
		return err
	}
	if err := c.readSecretFile("join_token_file", c.JoinTokenFile, &c.JoinToken); err != nil {
		return err
	}
	return c.readSecretFile("local_api_token_file", c.LocalAPITokenFile, &c.LocalAPIToken)
}

// fillDefaults fills what was left empty and makes paths absolute.
func (c *Config) fillDefaults() error {
	if c.DataDir == "" {
		c.DataDir = "/var/lib/nodemgr/agent"
	}
	abs, err := filepath.Abs(c.DataDir)
	if err != nil {
		return errdefs.Field("data_dir", "%v", err)
	}
	c.DataDir = filepath.Clean(abs)
	if c.OverlayRelayAfter == 0 {
		c.OverlayRelayAfter = 15 * time.Second
	}
	if c.Name == "" {
		h, _ := os.Hostname()
		c.Name = h
	}
	if c.Keepalive == 0 {
		c.Keepalive = DefaultKeepalive
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
	if c.BlobCacheMax == 0 {
		c.BlobCacheMax = 10 << 30
	}
	if c.Version == "" {
		c.Version = "dev"
	}
	if c.Prefix == "" {
		c.Prefix = c.DataDir
	}
	if c.Prefix, err = filepath.Abs(c.Prefix); err != nil {
		return errdefs.Field("prefix", "%v", err)
	}
	if c.LocalAPISocket == "" {
		c.LocalAPISocket = defaultSocket(c.DataDir)
	}
	if c.OnboardShare == 0 {
		c.OnboardShare = 90
	}
	if c.IMDS != "" && c.IMDSInterval == 0 {
		c.IMDSInterval = imds.DefaultInterval
	}
	if c.PortRange == "" {
		c.PortRange = fmt.Sprintf("%d-%d", portalloc.DefaultMin, portalloc.DefaultMax)
	}
	return nil
}

// readSecretFile sets *value from file unless a value was given.
func (c *Config) readSecretFile(field, file string, value *string) error {
	if *value != "" || file == "" {
		return nil
	}
	secret, open, err := auth.ReadSecretFile(file)
	if err != nil {
		return errdefs.Field(field, "%v", err)
	}
	if open {
		c.openSecretFiles = append(c.openSecretFiles, file)
	}
	*value = secret
	return nil
}

// validate checks the config and names the field at fault.
func (c *Config) validate() error {
	if err := c.validateServer(); err != nil {
		return err
	}
	if err := c.validateWorkloads(); err != nil {
		return err
	}
	if err := workload.CheckUser("task_user", c.TaskUser); err != nil {
		return err
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
	if c.Keepalive != 0 && (c.Keepalive < 100*time.Millisecond || c.Keepalive > 5*time.Minute) {
		return errdefs.Field("keepalive", "must be between 100ms and 5m, got %s", c.Keepalive)
	}
	if c.BlobCacheMax < 0 {
		return errdefs.Field("blob_cache_max", "must be a size in bytes, got %d", c.BlobCacheMax)
	}
	if c.ShutdownGrace < 0 {
		return errdefs.Field("shutdown_grace", "must not be negative, got %s", c.ShutdownGrace)
	}
	if err := c.validateIMDS(); err != nil {
		return err
	}
	if err := c.validateOverlay(); err != nil {
		return err
	}
	if c.ReconnectMin <= 0 || c.ReconnectMax < c.ReconnectMin {
		return errdefs.Field("reconnect_max", "must be at least reconnect_min (%s), got %s", c.ReconnectMin, c.ReconnectMax)
	}
	return nil
}

// validateIMDS checks the metadata service's settings: plain http (IMDS
// speaks nothing else) to a host.
func (c *Config) validateIMDS() error {
	if c.IMDS != "" {
		u, err := url.Parse(c.IMDS)
		if err != nil || u.Scheme != "http" || u.Host == "" {
			return errdefs.Field("imds", "must be an http:// URL, like %s on EC2, got %q", imds.DefaultEndpoint, c.IMDS)
		}
	}
	if c.IMDSInterval < 0 || (c.IMDSInterval > 0 && c.IMDSInterval < 10*time.Millisecond) {
		return errdefs.Field("imds_interval", "must be at least 10ms, got %s", c.IMDSInterval)
	}
	return nil
}

func (c *Config) validateServer() error {
	if c.Standalone {
		if c.Server != "" {
			return errdefs.Field("server", "a standalone agent has no server; drop --server or --standalone")
		}
		return nil
	}
	if c.Server == "" {
		return errdefs.Field("server", "required: the coordinator URL, e.g. http://127.0.0.1:7070 (--server or NODEMGR_SERVER), or run with --standalone")
	}
	c.Servers = nil
	scheme := ""
	for _, s := range strings.Split(c.Server, ",") {
		s = strings.TrimRight(strings.TrimSpace(s), "/")
		u, err := url.Parse(s)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return errdefs.Field("server", "must be an http:// or https:// URL (or several, separated by commas), got %q", s)
		}
		if scheme != "" && u.Scheme != scheme {
			return errdefs.Field("server", "%q and %q differ in scheme; the replicas of one coordinator all speak http or all https", c.Servers[0], s)
		}
		scheme = u.Scheme
		if err := cleartext.Check(s, c.InsecureHTTP, insecureSetting); err != nil {
			return errdefs.Field("server", "%v", err)
		}
		c.Servers = append(c.Servers, s)
	}
	return nil
}

// insecureSetting is how the agent's users accept secrets in clear text.
const insecureSetting = "--insecure-http (insecure_http: true, NODEMGR_INSECURE_HTTP=true)"

// inClear lists the servers the agent's secrets reach unencrypted, which
// InsecureHTTP allowed.
func (c *Config) inClear() []string {
	var out []string
	for _, s := range c.Servers {
		if cleartext.InClear(s) {
			out = append(out, s)
		}
	}
	return out
}

// maxSocketPath is what fits in sockaddr_un.sun_path with its NUL.
const maxSocketPath = 107

func (c *Config) validateWorkloads() error {
	if len(c.LocalAPISocket) > maxSocketPath {
		return errdefs.Field("local_api_socket", "%q is longer than the %d bytes a unix socket path may have; choose a shorter path", c.LocalAPISocket, maxSocketPath)
	}
	if c.LocalAPIListen != "" {
		if _, _, err := net.SplitHostPort(c.LocalAPIListen); err != nil {
			return errdefs.Field("local_api_listen", "must be host:port, got %q", c.LocalAPIListen)
		}
		if len(c.LocalAPIToken) < 16 {
			return errdefs.Field("local_api_token", "required, at least 16 characters, when local_api_listen is set: the TCP local API is never open without a token")
		}
	}
	if c.ContainerHostIP != "" && net.ParseIP(c.ContainerHostIP) == nil {
		return errdefs.Field("container_host_ip", "must be an IP address, got %q", c.ContainerHostIP)
	}
	if c.ContainerUsageInterval < 0 || (c.ContainerUsageInterval > 0 && c.ContainerUsageInterval < 100*time.Millisecond) {
		return errdefs.Field("container_usage_interval", "must be at least 100ms, got %s", c.ContainerUsageInterval)
	}
	if c.ContainerDefaults != nil {
		if err := c.ContainerDefaults.Check("container_defaults"); err != nil {
			return err
		}
	}
	if c.Procs < 0 {
		return errdefs.Field("procs", "must not be negative, got %d", c.Procs)
	}
	if c.OnboardShare > 0 && (c.OnboardShare < 10 || c.OnboardShare > 90) {
		return errdefs.Field("onboard_share", "must be 10-90 (percent of the machine), or negative to onboard by hand; got %d", c.OnboardShare)
	}
	if _, _, err := c.portRange(); err != nil {
		return err
	}
	for group, base := range c.Depots {
		u, err := url.Parse(base)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return errdefs.Field("depots."+group, "must be an http:// or https:// URL, got %q", base)
		}
	}
	return nil
}

// portRange parses PortRange ("min-max").
func (c *Config) portRange() (lo, hi int, err error) {
	a, b, ok := strings.Cut(c.PortRange, "-")
	lo, err1 := strconv.Atoi(strings.TrimSpace(a))
	hi, err2 := strconv.Atoi(strings.TrimSpace(b))
	if !ok || err1 != nil || err2 != nil || lo < 1 || hi > 65535 || lo > hi {
		return 0, 0, errdefs.Field("port_range", "must be min-max within 1-65535, e.g. 16384-65535, got %q", c.PortRange)
	}
	return lo, hi, nil
}

// DefaultProcs is the agent's default GOMAXPROCS on a machine with cores
// cores: one per 8, at least one. Measured on 2 cores, one thread instead
// of two lifted nodemgr bench dispatch by about a seventh: an agent that
// spins threads waiting for frames takes them from its workers.
func DefaultProcs(cores int) int { return max(1, cores/8) }

// defaultSocket is <dataDir>/agent.sock, or, when that path is too long
// for a unix socket (a deep data dir), a name in the temp dir derived
// from the data dir, so that the agent still starts.
func defaultSocket(dataDir string) string {
	p := filepath.Join(dataDir, "agent.sock")
	if len(p) <= maxSocketPath {
		return p
	}
	sum := sha256.Sum256([]byte(dataDir))
	return filepath.Join(os.TempDir(), "nodemgr-agent-"+hex.EncodeToString(sum[:6])+".sock")
}

// DefaultKeepalive is how often an agent pings its server by default:
// with the two-period deadline, a frozen server is left within about 6s,
// inside the server's 10s grace for a lost connection.
const DefaultKeepalive = 2 * time.Second
