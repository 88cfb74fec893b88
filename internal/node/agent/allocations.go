package agent

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/base/httpapi"
	"github.com/nodemgr/nodemgr/internal/base/workload"
	"github.com/nodemgr/nodemgr/internal/node/capacity"
	"github.com/nodemgr/nodemgr/internal/node/container"
	"github.com/nodemgr/nodemgr/internal/node/service"
)

// Every workload on the node holds an allocation in the node's books
// (internal/node/capacity), under an id made of its kind and name: a container
// job and a service book what they ask for before they start and give it
// back when they end; a suite's worker pool is listed with the cores it is
// pinned to but books nothing, since its workers share those cores by
// their pinning strategy rather than by reservation.

func allocationID(kind, name string) string { return kind + ":" + name }

// initCapacity opens the books once the hardware is known and, on a
// node's first start, onboards the configured share.
func (w *workloads) initCapacity(ctx context.Context, cfg Config, hw api.Hardware) error {
	path := filepath.Join(cfg.DataDir, "capacity.json")
	_, serr := os.Stat(path)
	firstStart := errors.Is(serr, fs.ErrNotExist) // later, an offboarded node stays so
	l, err := capacity.New(capacity.Config{StatePath: path, Hardware: hw, DataDir: cfg.DataDir,
		Ports: commitmentPorts{w.ports}})
	if err != nil {
		return err
	}
	if firstStart && cfg.OnboardShare > 0 {
		score, err := capacity.Benchmark(ctx, 0)
		if err != nil {
			return fmt.Errorf("cpu benchmark: %w", err)
		}
		o, err := l.Onboard(cfg.OnboardShare, score)
		if err != nil {
			return fmt.Errorf("onboard %d%%: %w", cfg.OnboardShare, err)
		}
		w.log.Info("onboarded", "share", o.SharePercent, "cpus", o.Offered.CPUs, "memory_mb", o.Offered.MemoryMB, "cpu_score", score)
	}
	w.capMu.Lock()
	w.capacity = l
	w.capMu.Unlock()
	return nil
}

// books returns the ledger, or an error while it is not open yet.
func (w *workloads) books() (*capacity.Ledger, error) {
	w.capMu.Lock()
	defer w.capMu.Unlock()
	if w.capacity == nil {
		return nil, fmt.Errorf("the agent is still starting (detecting hardware); try again in a moment: %w", errdefs.ErrUnavailable)
	}
	return w.capacity, nil
}

// book allocates a workload's resources, from a commitment when one is
// named; the id must not be booked yet.
func (w *workloads) book(kind, name string, r api.Resources, commitment string) error {
	l, err := w.books()
	if err != nil {
		return err
	}
	_, err = l.Allocate(api.Allocation{ID: allocationID(kind, name), Kind: kind, Name: name, Resources: r}, commitment)
	return err
}

// unbook gives a workload's resources back; one not booked is fine.
func (w *workloads) unbook(kind, name string) {
	l, err := w.books()
	if err != nil {
		return
	}
	if err := l.Free(allocationID(kind, name)); err != nil && !errdefs.IsNotFound(err) {
		w.log.Warn("free allocation", "kind", kind, "name", name, "err", err)
	}
}

// booked reports whether a workload holds an allocation.
func (w *workloads) booked(kind, name string) bool {
	l, err := w.books()
	if err != nil {
		return false
	}
	_, err = l.Get(allocationID(kind, name))
	return err == nil
}

// deployContainer books a job's CPUs and memory, then deploys it; the
// booking is given back when the deploy fails or the job ends.
func (w *workloads) deployContainer(ctx context.Context, job api.ContainerJob) (api.Container, error) {
	if err := workload.CheckContainer(job); err != nil {
		return api.Container{}, err
	}
	// What is booked is what the engine enforces: a job without limits
	// gets the node's defaults as real limits, or is refused.
	job, err := container.ApplyDefaults(job, w.containerDefaults)
	if err != nil {
		return api.Container{}, fmt.Errorf("deploy container %s: %w", cmp.Or(job.ID, job.Name), err)
	}
	if job.ID == "" {
		job.ID = container.NewJobID()
	}
	if _, err := w.containers.Get(job.ID); err == nil && w.booked(api.AllocationContainer, job.ID) {
		return api.Container{}, errdefs.Conflict("container %s exists on this node; delete it first or choose another id", job.ID)
	}
	w.unbook(api.AllocationContainer, job.ID) // a finished job's leftover, if any
	commitment := job.Commitment
	job.Commitment = "" // used up here: a redeploy or a move books afresh
	if err := w.book(api.AllocationContainer, job.ID, api.Resources{CPUs: job.CPUs, MemoryMB: job.MemoryMB}, commitment); err != nil {
		return api.Container{}, fmt.Errorf("deploy container %s: %w", job.ID, err)
	}
	c, err := w.containers.Deploy(ctx, job)
	if err != nil || api.ContainerFinal(c.Status) {
		w.unbook(api.AllocationContainer, job.ID)
	}
	return c, err
}

// bookedFor is what a service holds in the books: its resources, or
// else its expected memory.
func bookedFor(spec api.ServiceSpec) api.Resources {
	if spec.Resources != nil {
		return *spec.Resources
	}
	return api.Resources{MemoryMB: spec.ExpectedMemoryMB}
}

// startService books a service's resources, from its commitment when it
// names one, then starts it.
func (w *workloads) startService(ctx context.Context, spec api.ServiceSpec) (api.Service, error) {
	commitment := spec.Commitment
	spec.Commitment = "" // used up here: a restart books afresh
	fresh := !w.booked(api.AllocationService, spec.Coordinate)
	if fresh {
		if err := w.book(api.AllocationService, spec.Coordinate, bookedFor(spec), commitment); err != nil {
			return api.Service{}, fmt.Errorf("start service %s: %w", spec.Coordinate, err)
		}
	}
	svc, err := w.services.Start(ctx, spec)
	if err != nil && fresh {
		w.unbook(api.AllocationService, spec.Coordinate)
	}
	return svc, err
}

// restartService books a service that holds nothing (it was stopped,
// drained, or it exited or failed), then restarts it: a restart is a start
// and must fit in the books like one.
func (w *workloads) restartService(ctx context.Context, coord string) (api.Service, error) {
	cur, err := w.services.Get(coord)
	if err != nil {
		return api.Service{}, fmt.Errorf("restart service %s: %w", coord, err)
	}
	fresh := !w.booked(api.AllocationService, coord)
	if fresh {
		if err := w.book(api.AllocationService, coord, bookedFor(cur.Spec), ""); err != nil {
			return api.Service{}, fmt.Errorf("restart service %s: %w", coord, err)
		}
	}
	svc, err := w.services.Restart(ctx, coord)
	if err != nil && fresh && !service.Active(svc.State) {
		w.unbook(api.AllocationService, coord)
	}
	return svc, err
}

// servicesChanged keeps the books in step with the services, then
// republishes the presence; the supervisor calls it after every change.
func (w *workloads) servicesChanged() {
	w.syncServiceBooks()
	w.poke()
}

// syncServiceBooks makes the books hold every service that runs or is
// about to (starting, restarting, draining, stopping) and none that
// stopped, exited or failed. It is level-triggered: whichever path changed
// a service (a user's stop or restart, the supervisor's own restarts, an
// adoption after an agent restart), the books follow its state. A service
// that runs but no longer fits (the share was lowered meanwhile) is kept
// running and logged: the books must not lose what holds the machine.
func (w *workloads) syncServiceBooks() {
	l, err := w.books()
	if err != nil {
		return // not open yet: reconcileBooks syncs once it is
	}
	w.bookMu.Lock()
	defer w.bookMu.Unlock()
	for _, s := range w.services.Summaries() {
		_, gerr := l.Get(allocationID(api.AllocationService, s.Coordinate))
		booked := gerr == nil
		switch {
		case service.Active(s.State) && !booked:
			spec, err := w.services.Get(s.Coordinate)
			if err != nil {
				continue // removed meanwhile
			}
			if err := w.book(api.AllocationService, s.Coordinate, bookedFor(spec.Spec), ""); err != nil {
				w.log.Warn("a running service could not be booked; it keeps running outside the books", "coordinate", s.Coordinate, "err", err)
			}
		case !service.Active(s.State) && booked:
			w.unbook(api.AllocationService, s.Coordinate)
		}
	}
}

// allocationView is an allocation with what its workload says of itself
// now: state and ports.
func (w *workloads) allocationView(a api.Allocation) api.Allocation {
	switch a.Kind {
	case api.AllocationContainer:
		if c, err := w.containers.Get(a.Name); err == nil {
			a.State = c.Status
			for _, p := range c.Ports {
				if !slices.Contains(a.Ports, p.Host) {
					a.Ports = append(a.Ports, p.Host)
				}
			}
		}
	case api.AllocationService:
		if s, err := w.services.Get(a.Name); err == nil {
			a.State = s.State
			if s.Port > 0 {
				a.Ports = []int{s.Port}
			}
		}
	}
	return a
}

// reconcileBooks gives back the allocations of workloads that ended while
// the agent was away (a container that exited, a service removed), and
// books the services that run (see syncServiceBooks).
func (w *workloads) reconcileBooks() {
	l, err := w.books()
	if err != nil {
		return
	}
	for _, a := range l.List() {
		switch a.Kind {
		case api.AllocationContainer:
			if c, err := w.containers.Get(a.Name); err != nil || api.ContainerFinal(c.Status) {
				w.unbook(a.Kind, a.Name)
			}
		case api.AllocationService:
			if _, err := w.services.Get(a.Name); err != nil {
				w.unbook(a.Kind, a.Name) // removed while the agent was away
			}
		case api.AllocationPool:
			w.unbook(a.Kind, a.Name) // a pool never outlives its agent
		}
	}
	w.syncServiceBooks()
}

func (a *Agent) resources(*http.Request) (api.NodeResources, error) {
	return a.wl.resources()
}

// resources is the node's books now, each allocation with its workload's
// state and ports.
func (w *workloads) resources() (api.NodeResources, error) {
	l, err := w.books()
	if err != nil {
		return api.NodeResources{}, err
	}
	res, err := l.Resources()
	if err != nil {
		return api.NodeResources{}, err
	}
	for i, al := range res.Allocations {
		res.Allocations[i] = w.allocationView(al)
	}
	return res, nil
}

// booksReport decides whether the server's copy of the books needs this
// report: when what is booked changed (the machine's free memory and load
// change all the time and do not count), or every booksRefresh.
type booksReport struct {
	sent   []byte // the books part of the last report the server took
	sentAt time.Time
}

const booksRefresh = 5 * time.Minute

// due returns the books to report now, or false.
func (b *booksReport) due(res api.NodeResources, now time.Time) ([]byte, bool) {
	res.MachineFree, res.MachineFreeError, res.Usage = nil, "", nil
	key, err := json.Marshal(res)
	if err != nil {
		return nil, false
	}
	return key, !bytes.Equal(key, b.sent) || now.Sub(b.sentAt) >= booksRefresh
}

func (a *Agent) onboard(r *http.Request, req api.OnboardRequest) (api.Onboarding, error) {
	l, err := a.wl.books()
	if err != nil {
		return api.Onboarding{}, err
	}
	score, err := capacity.Benchmark(r.Context(), 0)
	if err != nil {
		return api.Onboarding{}, fmt.Errorf("cpu benchmark: %w", err)
	}
	return l.Onboard(req.SharePercent, score)
}

func (a *Agent) handleOffboard(w http.ResponseWriter, r *http.Request) error {
	force, err := boolQuery(r, "force")
	if err != nil {
		return err
	}
	l, err := a.wl.books()
	if err != nil {
		return err
	}
	if err := l.Offboard(force); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (a *Agent) handleListAllocations(w http.ResponseWriter, r *http.Request) error {
	l, err := a.wl.books()
	if err != nil {
		return err
	}
	out := api.AllocationList{Allocations: []api.Allocation{}}
	for _, al := range l.List() {
		out.Allocations = append(out.Allocations, a.wl.allocationView(al))
	}
	httpapi.WriteJSON(w, http.StatusOK, out)
	return nil
}

// allocation finds the allocation named by the {id} path value.
func (a *Agent) allocation(r *http.Request) (api.Allocation, error) {
	l, err := a.wl.books()
	if err != nil {
		return api.Allocation{}, err
	}
	al, err := l.Get(r.PathValue("id"))
	if err != nil {
		return api.Allocation{}, fmt.Errorf("%w (see nodemgr allocation ls NODE)", err)
	}
	return a.wl.allocationView(al), nil
}

// handleAllocationAction stops or restarts the workload behind an
// allocation, whatever its kind.
func (a *Agent) handleAllocationAction(w http.ResponseWriter, r *http.Request) error {
	al, err := a.allocation(r)
	if err != nil {
		return err
	}
	action := r.PathValue("action")
	if action != "stop" && action != "restart" {
		return errdefs.NotFound("no allocation action %q: use stop or restart", action)
	}
	switch al.Kind {
	case api.AllocationContainer:
		err = a.restartContainer(r.Context(), al.Name, action == "restart")
	case api.AllocationService:
		if action == "stop" {
			_, err = a.wl.services.Stop(r.Context(), al.Name)
			a.wl.unbook(al.Kind, al.Name)
		} else {
			_, err = a.wl.restartService(r.Context(), al.Name)
		}
	case api.AllocationPool:
		if action == "restart" {
			return errdefs.Conflict("a worker pool cannot be restarted on its own; it runs while its suite has tasks for this node")
		}
		err = a.stopPool(r.Context(), al.Name)
	}
	if err != nil {
		return err
	}
	al.State = "stopped" // a pool's, once its suite is left
	if l, lerr := a.wl.books(); lerr == nil {
		if now, gerr := l.Get(al.ID); gerr == nil {
			al = now
		}
	}
	httpapi.WriteJSON(w, http.StatusOK, a.wl.allocationView(al))
	return nil
}

// poolStopWait bounds how long allocation stop waits for a pool to end:
// its tasks get their kill grace (10 s by default) and then some.
const poolStopWait = 30 * time.Second

// stopPool stops a suite's pool on this node for good (stopSuiteHere) and
// waits until the suite is left, so that the answer says stopped.
func (a *Agent) stopPool(ctx context.Context, suiteID string) error {
	left := a.runner.stopSuiteHere(suiteID)
	if left == nil {
		return errdefs.Conflict("suite %s does not run on this node any more", suiteID)
	}
	select {
	case <-left:
		return nil
	case <-time.After(poolStopWait):
		return fmt.Errorf("the pool of suite %s is still stopping after %s; check again with nodemgr allocation ls NODE: %w", suiteID, poolStopWait, errdefs.ErrUnavailable)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// restartContainer deletes a job's container and, for a restart, deploys
// the job again: containers run once, so a restart is a fresh one.
func (a *Agent) restartContainer(ctx context.Context, id string, again bool) error {
	c, err := a.wl.containers.Delete(ctx, id)
	a.wl.unbook(api.AllocationContainer, id)
	if err != nil || !again {
		return err
	}
	if err := a.wl.containers.Forget(id); err != nil {
		return err
	}
	_, err = a.wl.deployContainer(ctx, c.Job)
	return err
}

func (a *Agent) handleAllocationLogs(w http.ResponseWriter, r *http.Request) error {
	al, err := a.allocation(r)
	if err != nil {
		return err
	}
	var b []byte
	switch al.Kind {
	case api.AllocationContainer:
		b, err = a.wl.containers.Logs(r.Context(), al.Name, 200)
	case api.AllocationService:
		b, err = a.wl.services.Logs(al.Name, 64<<10)
	default:
		return errdefs.NotFound("a worker pool keeps no log of its own; each task's output is in its result (nodemgr task show TASK)")
	}
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	_, err = w.Write(b)
	return err
}

// bookPool lists a suite's pool in the books while it runs (booking
// nothing; see the top of this file). A node that is not onboarded lists
// no pool: pools run there all the same.
func (w *workloads) bookPool(suiteID string, workers int, cores []int) {
	if err := w.book(api.AllocationPool, suiteID, api.Resources{}, ""); err != nil {
		if !errors.Is(err, errdefs.ErrUnavailable) {
			w.log.Warn("list worker pool in the books", "suite", suiteID, "err", err)
		}
		return
	}
	state := fmt.Sprintf("running, %d workers", workers)
	if len(cores) > 0 {
		names := make([]string, len(cores))
		for i, c := range cores {
			names[i] = strconv.Itoa(c)
		}
		state += " on cores " + strings.Join(names, ",")
	}
	if l, err := w.books(); err == nil {
		l.SetState(allocationID(api.AllocationPool, suiteID), state)
	}
}

func (a *Agent) commit(_ *http.Request, req api.CommitRequest) (api.Commitment, error) {
	l, err := a.wl.books()
	if err != nil {
		return api.Commitment{}, err
	}
	return l.Commit(req.Owner, req.Resources, req.Ports, time.Duration(req.TTL))
}

func (a *Agent) handleRelease(w http.ResponseWriter, r *http.Request) error {
	l, err := a.wl.books()
	if err != nil {
		return err
	}
	if err := l.Release(r.PathValue("id")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
