// Package enroll admits agents: a join token creates a node (a pool
// machine's bootstrap token only on its own machine), a node's credential
// or a re-join token bound to it takes it back, and each registration and
// renewal gets a fresh credential.
package enroll

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"path/filepath"
	"slices"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/auth"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/base/validate"
	"github.com/nodemgr/nodemgr/internal/coordinator/orchestrate"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
)

// Config tunes enrollment.
type Config struct {
	CredentialTTL time.Duration // a node credential's lifetime
}

// Store is what enrollment needs of the store.
type Store interface {
	GetNode(ctx context.Context, id string) (store.Node, error)
	UpdateNode(ctx context.Context, id string, fn func(*store.Node) error) (store.Node, error)
	JoinNode(ctx context.Context, tokenID string, at time.Time, n store.Node) (store.Node, error)
	UseJoinToken(ctx context.Context, id string, at time.Time) (store.Token, error)
	ReplaceNodeCredential(ctx context.Context, t store.Token) error
	GetDeployment(ctx context.Context, id string) (store.Deployment, error)
	UpdateDeployment(ctx context.Context, id string, fn func(*store.Deployment) error) (store.Deployment, error)
	LinkDeploymentNode(ctx context.Context, deploymentID, nodeID string) error
}

// Hooks are what enrollment asks of the rest of the server.
type Hooks struct {
	// WakeOrchestrator asks for a round: a pool machine's node joined.
	WakeOrchestrator func()
	// PoolEvent records what happened to a pool's machine.
	PoolEvent func(ctx context.Context, pool, machine, kind, msg string)
}

// Enroller admits agents.
type Enroller struct {
	cfg   Config
	store Store
	hooks Hooks
	log   *slog.Logger
}

// New makes an Enroller.
func New(cfg Config, st Store, hooks Hooks, logger *slog.Logger) *Enroller {
	return &Enroller{cfg: cfg, store: st, hooks: hooks, log: logger}
}

// Register admits the agent of req with token t, of kind: a node
// credential takes its node back, a join token bound to a node re-joins
// it, any other join token creates a node. from is the agent's address,
// for the log. It returns the node and its fresh credential.
func (e *Enroller) Register(ctx context.Context, t store.Token, kind string, req api.RegisterRequest, from string) (store.Node, api.RegisterResponse, error) {
	if err := ValidateRegister(req); err != nil {
		return store.Node{}, api.RegisterResponse{}, err
	}
	if kind == api.TokenJoin && t.DeploymentID != "" {
		if err := e.checkBootstrapMachine(ctx, t, req, from); err != nil {
			return store.Node{}, api.RegisterResponse{}, err
		}
	}
	var n store.Node
	var err error
	switch {
	case kind == api.TokenNode:
		n, err = e.rejoinNode(ctx, t.NodeID, req)
	case t.NodeID != "":
		n, err = e.rejoinWithToken(ctx, t, req)
	default:
		n, err = e.joinNode(ctx, t, req)
	}
	if err != nil {
		return store.Node{}, api.RegisterResponse{}, err
	}
	resp, err := e.Credential(ctx, n.ID)
	return n, resp, err
}

// ValidState says whether s is an agent state.
func ValidState(s string) bool {
	switch s {
	case api.AgentIdle, api.AgentPreparing, api.AgentExecuting, api.AgentCleanup, api.AgentShuttingDown, api.AgentDraining:
		return true
	}
	return false
}

// ValidateRegister checks a registration.
func ValidateRegister(req api.RegisterRequest) error {
	if req.MachineID == "" || len(req.MachineID) > 128 {
		return errdefs.Field("machine_id", "must be 1-128 characters")
	}
	if !filepath.IsAbs(req.DataDir) || len(req.DataDir) > 4096 {
		return errdefs.Field("data_dir", "must be an absolute path, got %q", req.DataDir)
	}
	if err := validate.Name("name", req.Name); err != nil {
		return err
	}
	if err := validate.Tags("tags", req.Tags); err != nil {
		return err
	}
	if err := validate.Labels("labels", req.Labels); err != nil {
		return err
	}
	if err := validate.Groups("groups", req.Groups); err != nil {
		return err
	}
	return ValidateHardware("hardware", req.Hardware)
}

// ValidateHardware checks the hardware an agent tells.
func ValidateHardware(field string, hw api.Hardware) error {
	if hw.Cores < 0 || hw.Cores > 1<<16 {
		return errdefs.Field(field+".cores", "must be between 0 and 65536, got %d", hw.Cores)
	}
	if len(hw.GPUs) > 1024 {
		return errdefs.Field(field+".gpus", "at most 1024 GPUs, got %d", len(hw.GPUs))
	}
	return nil
}

// joinNode creates a node with a join token. A node already registered for
// the machine and data dir is a conflict: the token cannot adopt it.
func (e *Enroller) joinNode(ctx context.Context, jt store.Token, req api.RegisterRequest) (store.Node, error) {
	// A join token scoped to groups admits nodes into those groups only.
	if len(jt.Groups) > 0 {
		for i, g := range req.Groups {
			if !slices.Contains(jt.Groups, g) {
				return store.Node{}, errdefs.Field(fmt.Sprintf("groups[%d]", i), "the join token does not admit nodes into group %q; ask for a join token of that group", g)
			}
		}
	}
	now := time.Now().UTC()
	groups := slices.Clone(req.Groups)
	for _, g := range jt.Groups {
		if !slices.Contains(groups, g) {
			groups = append(groups, g)
		}
	}
	slices.Sort(groups)
	// The use is spent with the node's creation, in one transaction: a
	// refused registration (a conflict) leaves the token as it was.
	n, err := e.store.JoinNode(ctx, jt.ID, now, store.Node{
		ID: auth.NewID("n-"), Name: req.Name, MachineID: req.MachineID, DataDir: req.DataDir,
		Tags: req.Tags, Labels: req.Labels, Groups: groups, Hardware: req.Hardware,
		Status: api.StatusOffline, StatusReason: "registered; waiting for the agent to connect",
		AgentState: api.AgentIdle, AgentVersion: req.AgentVersion, RegisteredAt: now, UpdatedAt: now,
	})
	if errors.Is(err, errdefs.ErrConflict) {
		return store.Node{}, errdefs.Conflict("a node is already registered for machine %s and data dir %s, and a join token cannot take it over: "+
			"the agent re-joins with its own credential (its state file in the data dir), or an admin creates a re-join token bound to that node "+
			"(nodemgr join-token create --node NODE), or removes the node (nodemgr node rm NODE)", req.MachineID, req.DataDir)
	}
	if errors.Is(err, errdefs.ErrPermission) {
		return store.Node{}, fmt.Errorf("join token %s: %w", jt.ID, err) // spent or expired
	}
	if err != nil {
		return store.Node{}, fmt.Errorf("register node: %w", err)
	}
	if jt.DeploymentID != "" {
		// The orchestrator made this token for one machine: its node is
		// that deployment's.
		if err := e.store.LinkDeploymentNode(ctx, jt.DeploymentID, n.ID); err != nil {
			return store.Node{}, fmt.Errorf("register node: %w", err)
		}
		e.hooks.WakeOrchestrator()
	}
	return n, nil
}

// checkBootstrapMachine refuses a pool machine's join token from any
// machine but that one: before it made the token, the orchestrator read
// through its executor the machine id the machine's agent registers with
// (store.Deployment.MachineID). It runs before the token's use is counted,
// so an impostor leaves it to the machine's own agent. The answer names
// neither id, or whoever holds a leaked token would learn which to claim;
// the pool machine's events say what came from where.
func (e *Enroller) checkBootstrapMachine(ctx context.Context, jt store.Token, req api.RegisterRequest, from string) error {
	d, err := e.store.GetDeployment(ctx, jt.DeploymentID)
	if errdefs.IsNotFound(err) {
		return fmt.Errorf("join token %s was made for a pool machine that is gone; register with a join token of your own (nodemgr join-token create): %w",
			jt.ID, errdefs.ErrPermission)
	}
	if err != nil {
		return fmt.Errorf("register node: %w", err)
	}
	if d.MachineID == "" || d.MachineID == req.MachineID {
		return nil
	}
	pool, machine := d.Labels[orchestrate.LabelPool], d.Labels[orchestrate.LabelMachine]
	e.log.Warn("bootstrap token used from another machine", "token", jt.ID, "deployment", d.ID, "pool", pool, "machine", machine,
		"from", from, "machine_id", req.MachineID, "want_machine_id", d.MachineID)
	if pool != "" {
		msg := fmt.Sprintf("refused a registration with machine %s's bootstrap token from %s: its agent's machine id %q is not the machine's (%s); "+
			"the token may have leaked, and stays unused for the machine's own agent", machine, from, req.MachineID, d.MachineID)
		e.hooks.PoolEvent(ctx, pool, machine, "refused", msg)
	}
	return fmt.Errorf("join token %s was made for one pool machine, and this agent does not run on it (its machine id differs): "+
		"a pool's bootstrap token registers only its own machine; register another machine with a join token of its own (nodemgr join-token create): %w",
		jt.ID, errdefs.ErrPermission)
}

// rejoinWithToken re-joins the node an admin bound the join token to.
func (e *Enroller) rejoinWithToken(ctx context.Context, jt store.Token, req api.RegisterRequest) (store.Node, error) {
	// Check the machine before spending a use: a wrong one changes nothing.
	n, err := e.store.GetNode(ctx, jt.NodeID)
	if err != nil {
		return store.Node{}, fmt.Errorf("re-join token %s: node %s: %w", jt.ID, jt.NodeID, err)
	}
	if err := sameMachine(n, req); err != nil {
		return store.Node{}, err
	}
	if _, err := e.store.UseJoinToken(ctx, jt.ID, time.Now().UTC()); err != nil {
		return store.Node{}, fmt.Errorf("join token %s: %w", jt.ID, err)
	}
	return e.rejoinNode(ctx, jt.NodeID, req)
}

// sameMachine checks that a re-join comes from the node's own machine and
// data dir.
func sameMachine(n store.Node, req api.RegisterRequest) error {
	if n.MachineID == req.MachineID && n.DataDir == req.DataDir {
		return nil
	}
	return fmt.Errorf("this credential belongs to node %s on machine %s, data dir %s, not to machine %s, data dir %s; "+
		"register this agent with a join token instead: %w", n.ID, n.MachineID, n.DataDir, req.MachineID, req.DataDir, errdefs.ErrPermission)
}

// rejoinNode lets an agent take back its own node: same machine and data
// dir, fresh name, hardware and version; tags and labels merged; groups kept.
func (e *Enroller) rejoinNode(ctx context.Context, nodeID string, req api.RegisterRequest) (store.Node, error) {
	n, err := e.store.UpdateNode(ctx, nodeID, func(n *store.Node) error {
		if err := sameMachine(*n, req); err != nil {
			return err
		}
		n.Name, n.Hardware, n.AgentVersion = req.Name, req.Hardware, req.AgentVersion
		for _, tag := range req.Tags {
			if !slices.Contains(n.Tags, tag) {
				n.Tags = append(n.Tags, tag)
			}
		}
		if n.Labels == nil {
			n.Labels = map[string]string{}
		}
		maps.Copy(n.Labels, req.Labels)
		return nil
	})
	if errdefs.IsNotFound(err) {
		return store.Node{}, fmt.Errorf("node %s was removed; register with a join token: %w", nodeID, errdefs.ErrUnauthenticated)
	}
	if err != nil {
		return store.Node{}, fmt.Errorf("re-join node %s: %w", nodeID, err)
	}
	return n, nil
}

// Credential replaces the node's credential with a fresh one.
func (e *Enroller) Credential(ctx context.Context, nodeID string) (api.RegisterResponse, error) {
	secret, hash := auth.NewSecret(api.TokenNode)
	now := time.Now().UTC()
	t := store.Token{ID: auth.NewID("t-"), Kind: api.TokenNode, NodeID: nodeID, Hash: hash,
		CreatedAt: now, ExpiresAt: now.Add(e.cfg.CredentialTTL)}
	if err := e.store.ReplaceNodeCredential(ctx, t); err != nil {
		return api.RegisterResponse{}, fmt.Errorf("issue node credential: %w", err)
	}
	return api.RegisterResponse{NodeID: nodeID, Credential: secret, ExpiresAt: t.ExpiresAt}, nil
}

// BindMachine binds a bootstrap token's deployment to the
// machine id of the first machine that fetches with it; a later fetch
// from another machine id is refused, as its registration would be.
func (e *Enroller) BindMachine(ctx context.Context, t store.Token, machineID, from string) (store.Deployment, error) {
	d, err := e.store.UpdateDeployment(ctx, t.DeploymentID, func(cur *store.Deployment) error {
		if cur.MachineID == "" {
			cur.MachineID = machineID
		}
		return nil
	})
	if errdefs.IsNotFound(err) {
		return d, fmt.Errorf("join token %s was made for a pool machine that is gone: %w", t.ID, errdefs.ErrPermission)
	}
	if err != nil {
		return d, fmt.Errorf("fetch the agent: %w", err)
	}
	return d, e.checkBootstrapMachine(ctx, t, api.RegisterRequest{MachineID: machineID}, from)
}
