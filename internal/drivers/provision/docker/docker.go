package docker

import (
	"context"
	"fmt"
	"maps"
	"math"
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/nodemgr/nodemgr/internal/drivers/provision/records"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"

	"github.com/nodemgr/nodemgr/internal/base/dockerengine"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/drivers/provision"
)

// Labels nodemgr puts on every container it makes.
const (
	LabelDeployment = "nodemgr.deployment" // the machine name
	LabelTemplate   = "nodemgr.template"
)

// Capabilities of a docker deployment.
const (
	CapExec = "exec:docker"
	CapCopy = "copy:docker"
)

// cleanupTimeout bounds the removal of a half-made container, which runs
// even when the caller's context is done.
const cleanupTimeout = 30 * time.Second

func init() {
	d := records.Docker
	d.New = func(settings map[string]string) (provision.Provider, error) { return New(settings) }
	d.HostNetwork = func(extra map[string]any) bool {
		mode, _ := extra["network_mode"].(string)
		return mode == "host"
	}
	provision.Register(d)
}

// engine is the part of the Engine API client the provider uses.
type engine interface {
	ContainerCreate(context.Context, client.ContainerCreateOptions) (client.ContainerCreateResult, error)
	ContainerStart(context.Context, string, client.ContainerStartOptions) (client.ContainerStartResult, error)
	ContainerInspect(context.Context, string, client.ContainerInspectOptions) (client.ContainerInspectResult, error)
	ContainerList(context.Context, client.ContainerListOptions) (client.ContainerListResult, error)
	ContainerRemove(context.Context, string, client.ContainerRemoveOptions) (client.ContainerRemoveResult, error)
	ContainerStop(context.Context, string, client.ContainerStopOptions) (client.ContainerStopResult, error)
	ContainerRestart(context.Context, string, client.ContainerRestartOptions) (client.ContainerRestartResult, error)
	ContainerPause(context.Context, string, client.ContainerPauseOptions) (client.ContainerPauseResult, error)
	ContainerUnpause(context.Context, string, client.ContainerUnpauseOptions) (client.ContainerUnpauseResult, error)
	ImageInspect(context.Context, string, ...client.ImageInspectOption) (client.ImageInspectResult, error)
	ImagePull(context.Context, string, client.ImagePullOptions) (client.ImagePullResponse, error)
	Close() error
}

// Docker provisions containers on one Docker engine.
type Docker struct {
	engine      engine
	host        string
	stopTimeout *int // seconds; nil: the engine's default
}

// New returns a provider for the engine that settings name (see the
// package doc). It does not contact the engine.
func New(settings map[string]string) (*Docker, error) {
	d := &Docker{}
	for k, v := range settings {
		switch k {
		case "host": // for Connect below
		case "stop_timeout":
			t, err := time.ParseDuration(v)
			if err != nil || t < 0 {
				return nil, errdefs.Field("settings.stop_timeout", "%q is not a non-negative duration such as 10s", v)
			}
			secs := int(math.Ceil(t.Seconds()))
			d.stopTimeout = &secs
		default:
			return nil, errdefs.Field("settings."+k, "unknown docker provider setting; known: host, stop_timeout")
		}
	}
	c, err := dockerengine.Connect(settings["host"])
	if err != nil {
		return nil, fmt.Errorf("docker provider: %w", err)
	}
	d.engine = c
	d.host = c.DaemonHost()
	return d, nil
}

// Name is "docker".
func (d *Docker) Name() string { return "docker" }

// Close releases the client's connections.
func (d *Docker) Close() error { return d.engine.Close() }

var validName = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]+$`)

// Provision creates and starts a container and returns once the engine
// reports it running. On error it removes whatever it created.
func (d *Docker) Provision(ctx context.Context, spec provision.Spec) (provision.Deployment, error) {
	cfg, err := parseExtra(spec.Extra)
	if err != nil {
		return provision.Deployment{}, fmt.Errorf("provision %s: %w", spec.Name, err)
	}
	name := spec.NameOrRandom()
	if !validName.MatchString(name) {
		return provision.Deployment{}, errdefs.Field("name", "%q cannot name a container: use letters, digits, _ . - (at least two, starting with a letter or digit)", name)
	}

	labels := map[string]string{}
	maps.Copy(labels, cfg.labels)
	maps.Copy(labels, spec.Labels)
	labels[LabelDeployment] = name
	labels[LabelTemplate] = spec.Template

	opts := client.ContainerCreateOptions{
		Name: name,
		Config: &container.Config{
			Image:      cfg.image,
			User:       cfg.user,
			Env:        cfg.env,
			Cmd:        cfg.cmd,
			Entrypoint: cfg.entrypoint,
			Hostname:   cfg.hostname,
			Labels:     labels,
		},
		HostConfig: &container.HostConfig{
			NetworkMode: container.NetworkMode(cfg.networkMode),
			Resources: container.Resources{
				NanoCPUs: cfg.nanoCPUs,
				Memory:   cfg.memory,
			},
		},
	}
	id, err := d.create(ctx, cfg, opts)
	if err != nil {
		return provision.Deployment{}, fmt.Errorf("provision %s: %w", name, err)
	}

	dep, err := d.start(ctx, id)
	if err != nil {
		err = provision.Undo(ctx, cleanupTimeout, err, fmt.Sprintf("removing container %.12s", id), func(ctx context.Context) error {
			return d.remove(ctx, id)
		})
		return provision.Deployment{}, fmt.Errorf("provision %s: %w", name, err)
	}
	dep.Template = spec.Template
	dep.Extra = maps.Clone(spec.Extra)
	return dep, nil
}

// create makes the container, pulling the image first if it is missing and
// the pull policy allows it.
func (d *Docker) create(ctx context.Context, cfg config, opts client.ContainerCreateOptions) (string, error) {
	res, err := d.engine.ContainerCreate(ctx, opts)
	if err != nil && cerrdefs.IsNotFound(err) && d.imageMissing(ctx, cfg.image) {
		if cfg.pull != pullMissing {
			return "", errdefs.NotFound("image %q is not on the docker engine at %s, and nodemgr did not try to pull it (pull policy %q; import or load it there, or set extra.pull to %q)",
				cfg.image, d.host, cfg.pull, pullMissing)
		}
		if perr := d.pull(ctx, cfg.image); perr != nil {
			return "", fmt.Errorf("image %q is not on the docker engine at %s, and pulling it failed: %w", cfg.image, d.host, dockerengine.Class(perr, errdefs.ErrNotFound))
		}
		res, err = d.engine.ContainerCreate(ctx, opts)
	}
	if err != nil {
		if ctx.Err() != nil {
			d.removeUnstarted(ctx, opts)
		}
		return "", fmt.Errorf("create container: %w", dockerengine.Classify(err))
	}
	return res.ID, nil
}

// removeUnstarted removes the container a cut-off create may have made
// after all: one of the name, with the labels asked for (the image may
// add more), never started. Anything else of that name is not ours to remove.
func (d *Docker) removeUnstarted(ctx context.Context, opts client.ContainerCreateOptions) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	res, err := d.engine.ContainerInspect(cctx, opts.Name, client.ContainerInspectOptions{})
	if err != nil {
		return
	}
	c := res.Container
	if c.State == nil || c.State.Status != container.StateCreated || c.Config == nil {
		return
	}
	for k, v := range opts.Config.Labels {
		if got, ok := c.Config.Labels[k]; !ok || got != v {
			return
		}
	}
	d.remove(cctx, c.ID)
}

func (d *Docker) imageMissing(ctx context.Context, ref string) bool {
	_, err := d.engine.ImageInspect(ctx, ref)
	return cerrdefs.IsNotFound(err)
}

func (d *Docker) pull(ctx context.Context, ref string) error {
	resp, err := d.engine.ImagePull(ctx, ref, client.ImagePullOptions{})
	if err != nil {
		return err
	}
	defer resp.Close()
	return resp.Wait(ctx)
}

// start starts a created container and checks that it kept running.
func (d *Docker) start(ctx context.Context, id string) (provision.Deployment, error) {
	if _, err := d.engine.ContainerStart(ctx, id, client.ContainerStartOptions{}); err != nil {
		return provision.Deployment{}, fmt.Errorf("start container %.12s: %w", id, dockerengine.Classify(err))
	}
	insp, err := d.inspect(ctx, id)
	if err != nil {
		return provision.Deployment{}, err
	}
	if st := insp.State; st == nil || !st.Running {
		return provision.Deployment{}, fmt.Errorf("container %.12s did not keep running: %s: %w", id, describeExit(insp), errdefs.ErrInvalid)
	}
	return deploymentOf(insp), nil
}

func describeExit(insp container.InspectResponse) string {
	st := insp.State
	if st == nil {
		return "no state"
	}
	msg := fmt.Sprintf("state %s, exit code %d", st.Status, st.ExitCode)
	if st.OOMKilled {
		msg += ", killed for want of memory"
	}
	if st.Error != "" {
		msg += ": " + st.Error
	}
	return msg
}

// Destroy force-removes the container; one that is gone already is not an
// error.
func (d *Docker) Destroy(ctx context.Context, dep provision.Deployment) error {
	id, err := resourceID(dep)
	if err != nil {
		return err
	}
	if err := d.remove(ctx, id); err != nil {
		return fmt.Errorf("destroy %s: %w", dep.Name, err)
	}
	return nil
}

func (d *Docker) remove(ctx context.Context, id string) error {
	_, err := d.engine.ContainerRemove(ctx, id, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
	if err == nil || cerrdefs.IsNotFound(err) {
		return nil
	}
	// A removal already under way finishes on its own.
	if cerrdefs.IsConflict(err) && strings.Contains(err.Error(), "already in progress") {
		return nil
	}
	return fmt.Errorf("remove container %.12s: %w", id, dockerengine.Classify(err))
}

// Find lists the containers nodemgr made on this engine that carry all
// the given labels (none: all of them), whatever their state. The server
// compares them with its store to find drift: containers it does not
// know, and deployments whose container is gone.
func (d *Docker) Find(ctx context.Context, labels map[string]string) ([]provision.Deployment, error) {
	f := client.Filters{}
	f.Add("label", LabelDeployment)
	for k, v := range labels {
		f.Add("label", k+"="+v)
	}
	res, err := d.engine.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: f})
	if err != nil {
		return nil, fmt.Errorf("find containers: %w", dockerengine.Classify(err))
	}
	out := make([]provision.Deployment, 0, len(res.Items))
	for _, s := range res.Items {
		dep := provision.Deployment{
			Provider:   "docker",
			ResourceID: s.ID,
			Name:       s.Labels[LabelDeployment],
			Template:   s.Labels[LabelTemplate],
			State:      stateOf(s.State),
			Executors:  []string{CapExec, CapCopy},
			Labels:     s.Labels,
			CreatedAt:  time.Unix(s.Created, 0).UTC(),
		}
		if s.NetworkSettings != nil {
			dep.Address = address(s.HostConfig.NetworkMode, s.NetworkSettings.Networks)
		}
		out = append(out, dep)
	}
	slices.SortFunc(out, func(a, b provision.Deployment) int {
		return strings.Compare(a.Name+"\x00"+a.ResourceID, b.Name+"\x00"+b.ResourceID)
	})
	return out, nil
}

func (d *Docker) inspect(ctx context.Context, id string) (container.InspectResponse, error) {
	res, err := d.engine.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
	if err != nil {
		return container.InspectResponse{}, fmt.Errorf("inspect container %.12s: %w", id, dockerengine.Classify(err))
	}
	return res.Container, nil
}

func deploymentOf(insp container.InspectResponse) provision.Deployment {
	dep := provision.Deployment{
		Provider:   "docker",
		ResourceID: insp.ID,
		Name:       strings.TrimPrefix(insp.Name, "/"),
		Executors:  []string{CapExec, CapCopy},
	}
	if insp.State != nil {
		dep.State = stateOf(insp.State.Status)
	}
	if insp.Config != nil {
		dep.Labels = insp.Config.Labels
		dep.Template = insp.Config.Labels[LabelTemplate]
	}
	if insp.NetworkSettings != nil && insp.HostConfig != nil {
		dep.Address = address(string(insp.HostConfig.NetworkMode), insp.NetworkSettings.Networks)
	}
	if t, err := time.Parse(time.RFC3339Nano, insp.Created); err == nil {
		dep.CreatedAt = t.UTC()
	}
	return dep
}

// address is the container's IP on its network-mode network, else on the
// first network (by name) that gave it one.
func address(mode string, networks map[string]*network.EndpointSettings) string {
	ip := func(n *network.EndpointSettings) netip.Addr {
		if n == nil {
			return netip.Addr{}
		}
		if n.IPAddress.IsValid() {
			return n.IPAddress
		}
		return n.GlobalIPv6Address
	}
	if a := ip(networks[mode]); a.IsValid() {
		return a.String()
	}
	for _, name := range slices.Sorted(maps.Keys(networks)) {
		if a := ip(networks[name]); a.IsValid() {
			return a.String()
		}
	}
	return ""
}

func resourceID(dep provision.Deployment) (string, error) { return dep.Resource("container ID") }

var (
	_ provision.Provider  = (*Docker)(nil)
	_ provision.Lifecycle = (*Docker)(nil)
	_ engine              = (*client.Client)(nil)
)
