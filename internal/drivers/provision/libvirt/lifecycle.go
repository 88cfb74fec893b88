package libvirt

import (
	"context"
	"fmt"
	"time"

	golibvirt "github.com/digitalocean/go-libvirt"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/drivers/provision"
)

// statePoll is how often Stop looks whether the guest has shut down.
const statePoll = 200 * time.Millisecond

// Verbs: a domain can do them all; hibernate is libvirt's managed save
// (memory written to disk, the domain shut off, restored on start).
func (p *Libvirt) Verbs() []string {
	return []string{provision.VerbStart, provision.VerbStop, provision.VerbHibernate, provision.VerbReboot, provision.VerbTerminate}
}

// Start boots a stopped machine, restores a hibernated one (libvirt does
// that on its own when a managed save image exists), resumes a paused one
// and wakes a suspended one; a running one is left alone.
func (p *Libvirt) Start(ctx context.Context, dep provision.Deployment) error {
	c, dom, err := p.lookup(ctx, dep)
	if err != nil {
		return fmt.Errorf("start %s: %w", dep.Name, err)
	}
	st, _, err := c.DomainGetState(dom, 0)
	if err != nil {
		return fmt.Errorf("start %s: %w", dep.Name, classify(err))
	}
	switch golibvirt.DomainState(st) {
	case golibvirt.DomainRunning, golibvirt.DomainBlocked:
		return nil
	case golibvirt.DomainPaused:
		err = c.DomainResume(dom)
	case golibvirt.DomainPmsuspended:
		err = c.DomainPmWakeup(dom, 0)
	case golibvirt.DomainShutdown:
		return errdefs.Conflict("start %s: it is shutting down; start it once it is stopped", dep.Name)
	default:
		err = c.DomainCreate(dom)
	}
	if err != nil {
		return fmt.Errorf("start %s: %w", dep.Name, classify(err))
	}
	return nil
}

// Stop shuts the guest down: an ACPI power-button press (or the guest
// agent's shutdown, where one runs), then, if it is still up after the
// stop_timeout grace, a hard power-off. A hibernated machine loses its
// saved memory and is stopped; a stopped one stays stopped.
func (p *Libvirt) Stop(ctx context.Context, dep provision.Deployment) error {
	c, dom, err := p.lookup(ctx, dep)
	if err != nil {
		return fmt.Errorf("stop %s: %w", dep.Name, err)
	}
	if err := p.stop(ctx, c, dom); err != nil {
		return fmt.Errorf("stop %s: %w", dep.Name, err)
	}
	return nil
}

func (p *Libvirt) stop(ctx context.Context, c client, dom golibvirt.Domain) error {
	st, _, err := c.DomainGetState(dom, 0)
	if err != nil {
		return classify(err)
	}
	switch golibvirt.DomainState(st) {
	case golibvirt.DomainShutoff, golibvirt.DomainCrashed, golibvirt.DomainNostate:
		if saved, err := c.DomainHasManagedSaveImage(dom, 0); err == nil && saved == 1 {
			if err := c.DomainManagedSaveRemove(dom, 0); err != nil {
				return fmt.Errorf("drop its saved memory: %w", classify(err))
			}
		}
		return nil
	case golibvirt.DomainPaused, golibvirt.DomainPmsuspended:
		// A frozen guest cannot answer the power button.
		return p.powerOff(c, dom)
	}
	if err := c.DomainShutdown(dom); err != nil && !isCode(err, golibvirt.ErrOperationInvalid) {
		return fmt.Errorf("shut down: %w", classify(err))
	}
	grace := time.NewTimer(p.stopTimeout)
	defer grace.Stop()
	for {
		st, _, err := c.DomainGetState(dom, 0)
		if err != nil {
			return classify(err)
		}
		if s := golibvirt.DomainState(st); s == golibvirt.DomainShutoff || s == golibvirt.DomainCrashed {
			return nil
		}
		select {
		case <-grace.C:
			return p.powerOff(c, dom)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(statePoll):
		}
	}
}

// lookupState finds the deployment's domain and its state.
func (p *Libvirt) lookupState(ctx context.Context, dep provision.Deployment) (client, golibvirt.Domain, string, error) {
	c, dom, err := p.lookup(ctx, dep)
	if err != nil {
		return nil, dom, "", err
	}
	st, err := stateOf(c, dom)
	return c, dom, st, err
}

// powerOff pulls the plug; a domain that stopped meanwhile is fine.
func (p *Libvirt) powerOff(c client, dom golibvirt.Domain) error {
	if err := c.DomainDestroy(dom); err != nil && !isCode(err, golibvirt.ErrOperationInvalid) {
		return fmt.Errorf("power off: %w", classify(err))
	}
	return nil
}

// Hibernate saves a running (or paused) machine's memory to disk and shuts
// it off (libvirt's managed save); Start restores it. A hibernated machine
// stays so; a stopped one cannot hibernate.
func (p *Libvirt) Hibernate(ctx context.Context, dep provision.Deployment) error {
	c, dom, st, err := p.lookupState(ctx, dep)
	if err != nil {
		return fmt.Errorf("hibernate %s: %w", dep.Name, err)
	}
	switch st {
	case provision.StateHibernated:
		return nil
	case provision.StateRunning:
	default:
		return errdefs.Conflict("hibernate %s: it is %s, and only a running machine hibernates", dep.Name, st)
	}
	if err := c.DomainManagedSave(dom, 0); err != nil {
		return fmt.Errorf("hibernate %s: %w", dep.Name, classify(err))
	}
	return nil
}

// Reboot asks the guest to reboot (ACPI, or the guest agent), as EC2 does,
// and resets it, as EC2 does too, if it has not rebooted within the
// stop_timeout grace. provision.Do refuses a stopped machine; a
// hibernated one is refused here: start it.
func (p *Libvirt) Reboot(ctx context.Context, dep provision.Deployment) error {
	c, dom, st, err := p.lookupState(ctx, dep)
	if err != nil {
		return fmt.Errorf("reboot %s: %w", dep.Name, err)
	}
	if st != provision.StateRunning {
		return errdefs.Conflict("reboot %s: it is %s, and only a running machine reboots", dep.Name, st)
	}

	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	events, subErr := c.SubscribeEvents(wctx, golibvirt.DomainEventIDReboot, nil)
	if subErr == nil {
		// The stream's sender blocks until read: drain it when done.
		defer func() {
			cancel()
			go func() {
				for range events {
				}
			}()
		}()
	}
	if err := c.DomainReboot(dom, golibvirt.DomainRebootDefault); err != nil {
		return fmt.Errorf("reboot %s: %w", dep.Name, classify(err))
	}
	if subErr != nil {
		return nil // no way to tell whether it rebooted: trust the guest
	}
	grace := time.NewTimer(p.stopTimeout)
	defer grace.Stop()
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				return nil
			}
			if m, isReboot := ev.(*golibvirt.DomainEventCallbackRebootMsg); isReboot && m.Msg.Dom.UUID == dom.UUID {
				return nil
			}
		case <-grace.C:
			if err := c.DomainReset(dom, 0); err != nil {
				return fmt.Errorf("reboot %s: the guest did not reboot within %s, and resetting it failed: %w", dep.Name, p.stopTimeout, classify(err))
			}
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Terminate removes the machine, as Destroy does.
func (p *Libvirt) Terminate(ctx context.Context, dep provision.Deployment) error {
	return p.Destroy(ctx, dep)
}

// State maps the domain's state onto EC2's:
//
//	running, blocked → running             shutdown (in progress) → stopping
//	shut off, crashed → stopped            shut off with a managed save → hibernated
//	paused, pmsuspended → hibernated       paused while starting up → pending
//	paused while saving → stopping         no state → pending
//	gone → terminated
func (p *Libvirt) State(ctx context.Context, dep provision.Deployment) (string, error) {
	c, dom, err := p.lookup(ctx, dep)
	if errdefs.IsNotFound(err) {
		return provision.StateTerminated, nil
	}
	if err != nil {
		return "", fmt.Errorf("state of %s: %w", dep.Name, err)
	}
	st, err := stateOf(c, dom)
	if isCode(err, golibvirt.ErrNoDomain) {
		return provision.StateTerminated, nil
	}
	if err != nil {
		return "", fmt.Errorf("state of %s: %w", dep.Name, err)
	}
	return st, nil
}

// StateReason is State with what libvirt says about why, where a person
// can act on it: a guest that crashed, a disk error that paused it, a
// start that failed. The reason is empty otherwise.
func (p *Libvirt) StateReason(ctx context.Context, dep provision.Deployment) (string, string, error) {
	c, dom, err := p.lookup(ctx, dep)
	if errdefs.IsNotFound(err) {
		return provision.StateTerminated, "", nil
	}
	if err != nil {
		return "", "", fmt.Errorf("state of %s: %w", dep.Name, err)
	}
	st, why, err := stateReasonOf(c, dom)
	if isCode(err, golibvirt.ErrNoDomain) {
		return provision.StateTerminated, "", nil
	}
	if err != nil {
		return "", "", fmt.Errorf("state of %s: %w", dep.Name, err)
	}
	return st, why, nil
}

func stateOf(c client, dom golibvirt.Domain) (string, error) {
	st, _, err := stateReasonOf(c, dom)
	return st, err
}

func stateReasonOf(c client, dom golibvirt.Domain) (string, string, error) {
	st, reason, err := c.DomainGetState(dom, 0)
	if err != nil {
		return "", "", classify(err)
	}
	saved := false
	if s := golibvirt.DomainState(st); s == golibvirt.DomainShutoff || s == golibvirt.DomainCrashed {
		n, err := c.DomainHasManagedSaveImage(dom, 0)
		if err != nil {
			return "", "", classify(err)
		}
		saved = n == 1
	}
	state, why := stateFor(golibvirt.DomainState(st), reason, saved)
	return state, why, nil
}

// stateFor maps a domain's state and libvirt's reason for it (and whether
// it has a managed save image) onto EC2's states, with a reason worth
// telling a person, if any.
func stateFor(st golibvirt.DomainState, reason int32, saved bool) (string, string) {
	switch st {
	case golibvirt.DomainRunning, golibvirt.DomainBlocked:
		return provision.StateRunning, ""
	case golibvirt.DomainShutdown:
		return provision.StateStopping, ""
	case golibvirt.DomainPaused:
		switch golibvirt.DomainPausedReason(reason) {
		case golibvirt.DomainPausedStartingUp:
			return provision.StatePending, ""
		case golibvirt.DomainPausedSave:
			return provision.StateStopping, ""
		case golibvirt.DomainPausedIoerror:
			return provision.StateHibernated, "paused by a disk I/O error (is its storage pool full?); start resumes it"
		case golibvirt.DomainPausedWatchdog:
			return provision.StateHibernated, "paused by its watchdog"
		case golibvirt.DomainPausedCrashed:
			return provision.StateHibernated, "the guest crashed (kernel panic); it is paused"
		}
		return provision.StateHibernated, ""
	case golibvirt.DomainPmsuspended:
		return provision.StateHibernated, "the guest suspended itself; start wakes it"
	case golibvirt.DomainShutoff, golibvirt.DomainCrashed:
		if saved {
			return provision.StateHibernated, ""
		}
		if st == golibvirt.DomainCrashed {
			return provision.StateStopped, "the guest crashed"
		}
		switch golibvirt.DomainShutoffReason(reason) {
		case golibvirt.DomainShutoffCrashed:
			return provision.StateStopped, "the guest crashed"
		case golibvirt.DomainShutoffFailed:
			return provision.StateStopped, "libvirt failed to start it"
		case golibvirt.DomainShutoffDaemon:
			return provision.StateStopped, "libvirtd stopped it"
		}
		return provision.StateStopped, ""
	}
	return provision.StatePending, ""
}
