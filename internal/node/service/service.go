package service

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/base/procenv"
	"github.com/nodemgr/nodemgr/internal/base/workload"
	"github.com/nodemgr/nodemgr/internal/node/proctree"
	"github.com/nodemgr/nodemgr/internal/node/runas"
)

// Artifacts finds installed artifacts; the agent adapts its artifact store.
type Artifacts interface {
	// Tree returns the installed, read-only tree of artifact id
	// ("group:artifact:version"), or an error that is
	// errdefs.ErrNotFound if it is not installed.
	Tree(id string) (string, error)
}

// Ports hands out the node's ports; the agent adapts its port allocator.
type Ports interface {
	// Allocate gives owner one port: port itself if port > 0 (an error if
	// it is taken or out of range), else any free one.
	Allocate(owner string, port int) (int, error)
	// Release gives back every port owner holds.
	Release(owner string)
	// Holds reports whether owner holds port.
	Holds(owner string, port int) bool
}

// Config configures a Supervisor.
type Config struct {
	// Prefix is the node's nodemgr prefix; runtime dirs live under
	// <Prefix>/runtime/<cell>/<user>/<service>/<instance>.
	Prefix string
	// StateDir holds one record per service (<coordinate>.json, 0600).
	StateDir  string
	Artifacts Artifacts
	// Ports allocates service ports. Nil: services get no port, and a
	// spec must ask for none (port 0 or -1).
	Ports Ports
	// HTTPClient downloads ServiceFile URLs. Nil: a client with timeouts.
	HTTPClient *http.Client
	// Logger receives what the supervisor does on its own (restarts,
	// rotations). Nil discards.
	Logger *slog.Logger
	// OnChange, if set, is called after any service changes state, with
	// no lock held, so the agent can publish its presence again.
	OnChange func()
	// Users says who services run as: a spec's user, resolved by the
	// policy, and for a spec that names none the policy's unprivileged
	// default. Nil: the supervisor's own user unless the spec names one.
	Users *runas.Policy

	// LogCheckInterval is how often log sizes are checked (default 1s).
	LogCheckInterval time.Duration
	// LogUnit is the bytes in one LogSpec.MaxSizeMB (default 1 MiB);
	// tests make it small.
	LogUnit int64
	// ProcPollInterval is how often /proc is polled for the exit of an
	// adopted process where pidfds are not supported (default 1s).
	ProcPollInterval time.Duration
	// MaxDownloadBytes caps one downloaded ServiceFile (default 1 GiB).
	MaxDownloadBytes int64
}

// Supervisor runs the services of one node and keeps them running.
type Supervisor struct {
	cfg      Config
	log      *slog.Logger
	http     *http.Client
	baseEnv  []string
	procs    *proctree.Manager // nil: process groups only (see tree.go)
	treeName string            // of its process tree and limit groups

	started   atomic.Bool
	ready     chan struct{} // closed once Run has re-adopted the recorded services
	quit      chan struct{} // closed when Run returns
	runCtx    context.Context
	cancelRun context.CancelFunc

	// bg counts the supervisor's own operations (scheduled restarts,
	// stops finished after adoption), which Run waits for, so the
	// records are final when it returns. Add only under mu while !closed.
	bg sync.WaitGroup

	mu     sync.Mutex
	svcs   map[string]*svc // by coordinate
	closed bool            // Run is returning: the supervisor no longer reacts to exits
}

// svc is one service the supervisor knows of.
type svc struct {
	coord workload.Coordinate
	// op is held, as a one-slot semaphore (so waiting for it can be
	// cancelled), through a whole operation on the service: start, stop,
	// drain, restart, remove, a scheduled restart. Operations on one
	// service run one at a time; reads never take it.
	op chan struct{}
	// wmu orders record writes, so an older state never overwrites a
	// newer one on disk.
	wmu sync.Mutex

	// Guarded by Supervisor.mu.
	rec     record
	onDisk  bool            // its record exists; false while a first Start is under way
	proc    *process        // the live process, nil when none
	grp     *proctree.Group // its process tree, opened on first use
	timer   *time.Timer     // a pending restart
	gen     uint64          // bumped when a pending restart is cancelled
	removed bool
}

func newSvc(c workload.Coordinate) *svc { return &svc{coord: c, op: make(chan struct{}, 1)} }

func (sv *svc) lock(ctx context.Context) error {
	select {
	case sv.op <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (sv *svc) unlock() { <-sv.op }

// New loads the service records in cfg.StateDir. It starts nothing: Run
// re-adopts the services that still run and restarts the others.
func New(cfg Config) (*Supervisor, error) {
	if err := supported(); err != nil {
		return nil, err
	}
	switch {
	case cfg.Prefix == "":
		return nil, errors.New("service supervisor: Prefix is required")
	case cfg.StateDir == "":
		return nil, errors.New("service supervisor: StateDir is required")
	case cfg.Artifacts == nil:
		return nil, errors.New("service supervisor: Artifacts is required")
	}
	cfg.LogCheckInterval = orDefault(cfg.LogCheckInterval, time.Second)
	cfg.ProcPollInterval = orDefault(cfg.ProcPollInterval, time.Second)
	cfg.LogUnit = cmp.Or(cfg.LogUnit, 1<<20)
	cfg.MaxDownloadBytes = cmp.Or(cfg.MaxDownloadBytes, 1<<30)
	s := &Supervisor{
		cfg:     cfg,
		log:     cfg.Logger,
		http:    cfg.HTTPClient,
		baseEnv: procenv.Clean(), // not the agent's environment: it holds its secrets
		ready:   make(chan struct{}),
		quit:    make(chan struct{}),
		svcs:    map[string]*svc{},
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.http == nil {
		s.http = defaultHTTPClient()
	}
	s.runCtx, s.cancelRun = context.WithCancel(context.Background())
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		return nil, fmt.Errorf("service supervisor: %w", err)
	}
	s.treeName = treeName(cfg.StateDir)
	procs, err := newTracker(s.treeName)
	if err != nil {
		s.log.Warn("cannot track services' process trees; a helper that leaves a service's process group outlives it (set NODEMGR_PROCTREE to a mode that works here)", "err", err)
	} else {
		s.procs = procs
	}
	recs, bad, err := loadRecords(cfg.StateDir)
	if err != nil {
		return nil, fmt.Errorf("service supervisor: load records: %w", err)
	}
	for _, err := range bad {
		s.log.Error("skip unreadable service record; fix or remove the file", "err", err)
	}
	for _, rec := range recs {
		c, _ := workload.ParseCoordinate(rec.Spec.Coordinate) // checked by loadRecords
		sv := newSvc(c)
		sv.rec, sv.onDisk = *rec, true
		s.svcs[c.String()] = sv
	}
	return s, nil
}

func defaultHTTPClient() *http.Client {
	return &http.Client{
		Timeout: 30 * time.Minute, // a whole download
		Transport: &http.Transport{
			Proxy:                 http.ProxyFromEnvironment,
			DialContext:           (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			TLSHandshakeTimeout:   10 * time.Second,
			ResponseHeaderTimeout: 30 * time.Second,
			IdleConnTimeout:       90 * time.Second,
		},
	}
}

// Run re-adopts the recorded services that still run, restarts those that
// died while no supervisor watched them (as their restart policy says),
// and then supervises until ctx ends. Operations wait until the re-adoption
// is done. On return the services are left running and their records kept,
// for the next agent to adopt; cancellation is not an error. Before it
// returns Run lets a restart under way finish, and a stop it resumed after
// adoption, so that no process runs that its record does not name.
func (s *Supervisor) Run(ctx context.Context) error {
	if !s.started.CompareAndSwap(false, true) {
		return errors.New("service supervisor: Run called twice")
	}
	s.adoptAll()
	close(s.ready)
	s.notify()

	var wg sync.WaitGroup
	wg.Go(func() { s.rotateLogs(s.runCtx, s.cfg.LogCheckInterval) })
	<-ctx.Done()

	s.mu.Lock()
	s.closed = true
	for _, sv := range s.svcs {
		s.cancelRestart(sv)
	}
	s.mu.Unlock()
	close(s.quit)
	s.cancelRun()
	wg.Wait()
	s.bg.Wait()
	s.releaseGroups()
	return nil
}

// waitReady waits until Run has re-adopted the recorded services, so an
// operation does not act on a service whose process is not yet known.
func (s *Supervisor) waitReady(ctx context.Context) error {
	select {
	case <-s.quit:
		return errShutDown
	default:
	}
	select {
	case <-s.ready:
		return nil
	case <-s.quit:
		return errShutDown
	case <-ctx.Done():
		return fmt.Errorf("the service supervisor is still starting: %w", ctx.Err())
	}
}

var errShutDown = fmt.Errorf("the service supervisor has shut down; try again once the agent is back: %w", errdefs.ErrUnavailable)

// notFound is the error for an unknown coordinate.
func notFound(c string) error {
	return errdefs.NotFound("no service %s on this node; list them with `nodemgr service ls NODE`", c)
}

// lookup finds a service and takes its operation lock.
func (s *Supervisor) lookup(ctx context.Context, coordinate string) (*svc, error) {
	c, err := workload.ParseCoordinate(coordinate)
	if err != nil {
		return nil, err
	}
	for {
		s.mu.Lock()
		sv := s.svcs[c.String()]
		s.mu.Unlock()
		if sv == nil {
			return nil, notFound(coordinate)
		}
		live, err := s.lockLive(ctx, sv)
		if err != nil {
			return nil, err
		}
		if live {
			return sv, nil
		}
	}
}

// claim is lookup for Start: a service not known yet is created, born
// locked so no other operation gets in before the Start.
func (s *Supervisor) claim(ctx context.Context, c workload.Coordinate) (*svc, error) {
	for {
		s.mu.Lock()
		sv := s.svcs[c.String()]
		if sv == nil {
			sv = newSvc(c)
			sv.op <- struct{}{}
			s.svcs[c.String()] = sv
			s.mu.Unlock()
			return sv, nil
		}
		s.mu.Unlock()
		live, err := s.lockLive(ctx, sv)
		if err != nil {
			return nil, err
		}
		if live {
			return sv, nil
		}
	}
}

// lockLive locks sv, and says whether it is still in the books; one
// removed while we waited is unlocked again, for the caller to look again.
func (s *Supervisor) lockLive(ctx context.Context, sv *svc) (bool, error) {
	if err := sv.lock(ctx); err != nil {
		return false, err
	}
	s.mu.Lock()
	removed := sv.removed
	s.mu.Unlock()
	if removed {
		sv.unlock()
		return false, nil
	}
	return true, nil
}

// save writes a service's record as it is now. Holding wmu while taking
// the snapshot makes the last write carry the last state.
func (s *Supervisor) save(sv *svc) error {
	sv.wmu.Lock()
	defer sv.wmu.Unlock()
	s.mu.Lock()
	if sv.removed {
		s.mu.Unlock()
		return nil
	}
	rec := sv.rec
	s.mu.Unlock()
	if err := writeRecord(s.cfg.StateDir, &rec); err != nil {
		return fmt.Errorf("write service record: %w", err)
	}
	s.mu.Lock()
	sv.onDisk = true
	s.mu.Unlock()
	return nil
}

// saveLogged is save for the supervisor's own changes, which have no
// caller to report a failure to.
func (s *Supervisor) saveLogged(sv *svc) {
	if err := s.save(sv); err != nil {
		s.log.Error("save service record", "coordinate", sv.coord.String(), "err", err)
	}
}

func (s *Supervisor) notify() {
	if s.cfg.OnChange != nil {
		s.cfg.OnChange()
	}
}

// tree finds a spec's artifact.
func (s *Supervisor) tree(id string) (string, error) {
	tree, err := s.cfg.Artifacts.Tree(id)
	if errors.Is(err, errdefs.ErrNotFound) {
		return "", errdefs.NotFound("artifact %s is not installed on this node; install it first with `nodemgr artifact install NODE %s`", id, id)
	}
	if err != nil {
		return "", fmt.Errorf("artifact %s: %w", id, err)
	}
	return tree, nil
}

func portOwner(c workload.Coordinate) string { return "service:" + c.String() }

// allocatePort gets a service its port: none for -1, the one asked for,
// or any free one, trying prefer first (or keeping it, if the service
// still holds it) so a restarted service keeps its port when it can.
func (s *Supervisor) allocatePort(c workload.Coordinate, want, prefer int) (int, error) {
	if want == -1 {
		return 0, nil
	}
	if s.cfg.Ports == nil {
		if want > 0 {
			return 0, errdefs.Field("port", "this node hands out no ports; use 0 or -1")
		}
		return 0, nil
	}
	owner := portOwner(c)
	if prefer > 0 && (want == 0 || want == prefer) && s.cfg.Ports.Holds(owner, prefer) {
		return prefer, nil // kept from the run before
	}
	s.cfg.Ports.Release(owner) // whatever an earlier run left behind
	if want > 0 {
		p, err := s.cfg.Ports.Allocate(owner, want)
		if err != nil {
			return 0, fmt.Errorf("port %d: %w", want, err)
		}
		return p, nil
	}
	if prefer > 0 {
		if p, err := s.cfg.Ports.Allocate(owner, prefer); err == nil {
			return p, nil
		}
	}
	p, err := s.cfg.Ports.Allocate(owner, 0)
	if err != nil {
		return 0, fmt.Errorf("port: %w", err)
	}
	return p, nil
}

func (s *Supervisor) releasePort(c workload.Coordinate) {
	if s.cfg.Ports != nil {
		s.cfg.Ports.Release(portOwner(c))
	}
}

// keepPort makes sure an adopted service still holds the port it listens
// on, in case the allocator's state was lost with the agent.
func (s *Supervisor) keepPort(c workload.Coordinate, port int) {
	if s.cfg.Ports == nil || port <= 0 || s.cfg.Ports.Holds(portOwner(c), port) {
		return
	}
	if _, err := s.cfg.Ports.Allocate(portOwner(c), port); err != nil {
		s.log.Warn("adopted service keeps a port the allocator could not give back to it", "coordinate", c.String(), "port", port, "err", err)
	}
}

// Get returns a service and its live status.
func (s *Supervisor) Get(coordinate string) (api.Service, error) {
	c, err := workload.ParseCoordinate(coordinate)
	if err != nil {
		return api.Service{}, fmt.Errorf("get service: %w", err)
	}
	s.mu.Lock()
	sv := s.svcs[c.String()]
	if sv == nil || sv.rec.State == "" {
		s.mu.Unlock()
		return api.Service{}, fmt.Errorf("get service: %w", notFound(coordinate))
	}
	v := s.viewLocked(sv)
	s.mu.Unlock()
	fillRSS([]*api.Service{&v})
	return v, nil
}

// List returns every service, by coordinate, with its live status.
func (s *Supervisor) List() []api.Service {
	s.mu.Lock()
	out := make([]api.Service, 0, len(s.svcs))
	for _, sv := range s.svcs {
		if sv.rec.State != "" {
			out = append(out, s.viewLocked(sv))
		}
	}
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b api.Service) int { return cmp.Compare(a.Spec.Coordinate, b.Spec.Coordinate) })
	ptrs := make([]*api.Service, len(out))
	for i := range out {
		ptrs[i] = &out[i]
	}
	fillRSS(ptrs)
	return out
}

// Summaries returns the services as the node's presence lists them.
func (s *Supervisor) Summaries() []api.ServiceSummary {
	s.mu.Lock()
	out := make([]api.ServiceSummary, 0, len(s.svcs))
	for _, sv := range s.svcs {
		if r := sv.rec; r.State != "" {
			out = append(out, api.ServiceSummary{Coordinate: r.Spec.Coordinate, Artifact: r.Spec.Artifact, State: r.State, PID: r.PID, Port: r.Port})
		}
	}
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b api.ServiceSummary) int { return cmp.Compare(a.Coordinate, b.Coordinate) })
	return out
}

// UsedBy returns the coordinates of the services that need artifact id:
// every one with a record, stopped ones too, since any of them may be
// restarted as it is.
func (s *Supervisor) UsedBy(id string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for c, sv := range s.svcs {
		if sv.rec.State != "" && sv.rec.Spec.Artifact == id {
			out = append(out, c)
		}
	}
	slices.Sort(out)
	return out
}

// Logs returns the last tail bytes of a service's current log
// (service.log; rotated files are beside it). tail <= 0 returns the whole
// file; either way at most 1 MiB.
func (s *Supervisor) Logs(coordinate string, tail int64) ([]byte, error) {
	b, _, err := s.ReadLog(coordinate, -1, tail)
	return b, err
}

// ReadLog returns part of a service's current log and the offset just
// past it, to follow the log with: with from < 0 the last n bytes, else up
// to n bytes from offset from, or from the start again if the log is
// shorter than from (it was rotated since). At most 1 MiB.
func (s *Supervisor) ReadLog(coordinate string, from, n int64) ([]byte, int64, error) {
	c, err := workload.ParseCoordinate(coordinate)
	if err != nil {
		return nil, 0, fmt.Errorf("logs of service: %w", err)
	}
	s.mu.Lock()
	sv := s.svcs[c.String()]
	known := sv != nil && sv.rec.State != ""
	s.mu.Unlock()
	if !known {
		return nil, 0, fmt.Errorf("logs of service %s: %w", coordinate, notFound(coordinate))
	}
	b, end, err := readLog(c.RuntimeDir(s.cfg.Prefix), logName, from, n)
	if err != nil {
		return nil, 0, fmt.Errorf("logs of service %s: %w", coordinate, err)
	}
	return b, end, nil
}

func (s *Supervisor) viewLocked(sv *svc) api.Service {
	r := sv.rec
	return api.Service{
		Spec:       r.Spec,
		State:      r.State,
		PID:        r.PID,
		Port:       r.Port,
		RuntimeDir: sv.coord.RuntimeDir(s.cfg.Prefix),
		Restarts:   r.Restarts,
		StartedAt:  r.StartedAt,
		LastExit:   r.LastExit,
		LastExitAt: r.LastExitAt,
		Reason:     r.Reason,
	}
}

func (s *Supervisor) view(sv *svc) api.Service {
	s.mu.Lock()
	v := s.viewLocked(sv)
	s.mu.Unlock()
	fillRSS([]*api.Service{&v})
	return v
}

// fillRSS measures the services that have a process, in one pass over
// /proc.
func fillRSS(svcs []*api.Service) {
	var pgids []int
	for _, v := range svcs {
		if v.PID > 0 {
			pgids = append(pgids, v.PID)
		}
	}
	if len(pgids) == 0 {
		return
	}
	rss := groupRSS(pgids)
	for _, v := range svcs {
		if v.PID > 0 {
			v.RSSBytes = rss[v.PID]
		}
	}
}
