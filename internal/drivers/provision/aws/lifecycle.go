package aws

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/base/imds"
	"github.com/nodemgr/nodemgr/internal/drivers/provision"
)

// EC2 state reason codes the provider reads.
const (
	reasonHibernate   = "Client.UserInitiatedHibernate"
	reasonSpotEnded   = "Server.SpotInstanceTermination"
	reasonSpotStopped = "Server.SpotInstanceShutdown"
)

// Verbs: EC2 can do them all, though not to every instance; CheckVerb
// says which a machine can.
func (a *AWS) Verbs() []string {
	return []string{provision.VerbStart, provision.VerbStop, provision.VerbHibernate, provision.VerbReboot, provision.VerbTerminate}
}

// CheckVerb refuses what EC2 would refuse for how d was launched, by its
// Extra: a one-time spot instance cannot be stopped or hibernated, and
// only an instance launched with hibernation enabled can hibernate.
func (a *AWS) CheckVerb(d provision.Deployment, verb string) error {
	spot, hib := spotOf(d.Extra), hibernationOf(d.Extra)
	return verbRule(d.Name, verb, spot, hib)
}

func verbRule(name, verb string, spot, hibernation bool) error {
	switch {
	case spot && (verb == provision.VerbStop || verb == provision.VerbHibernate):
		return errdefs.Field("verb", "%s is a one-time spot instance, which EC2 cannot %s (only reboot or terminate); a machine you want to stop must be launched on-demand (extra.spot false)", name, verb)
	case verb == provision.VerbHibernate && !hibernation:
		return errdefs.Field("verb", "%s was launched without hibernation, and EC2 hibernates only instances launched with it (extra.hibernation true); stop it instead", name)
	}
	return nil
}

// checkInstance applies verbRule to the instance as EC2 describes it,
// for a deployment whose Extra does not say (one Find returned).
func checkInstance(name, verb string, inst types.Instance) error {
	hib := inst.HibernationOptions != nil && awssdk.ToBool(inst.HibernationOptions.Configured)
	return verbRule(name, verb, inst.InstanceLifecycle == types.InstanceLifecycleTypeSpot, hib)
}

// Start starts a stopped or hibernated instance and waits until it runs;
// a running one is left alone.
func (a *AWS) Start(ctx context.Context, d provision.Deployment) error {
	inst, err := a.lookup(ctx, d)
	if err != nil {
		return fmt.Errorf("start %s: %w", d.Name, err)
	}
	switch inst.State.Name {
	case types.InstanceStateNameRunning, types.InstanceStateNamePending:
	case types.InstanceStateNameStopped:
		if _, err := a.ec2.StartInstances(ctx, &ec2.StartInstancesInput{InstanceIds: []string{d.ResourceID}}); err != nil {
			return fmt.Errorf("start %s: %w", d.Name, classify(err))
		}
	default:
		return fmt.Errorf("start %s: %w", d.Name, wrongState(inst, "start", "a stopped"))
	}
	return a.await(ctx, d, "start", provision.StateRunning, provision.StateStopped, provision.StateHibernated, provision.StatePending)
}

// Stop stops a running instance and waits until it is stopped; a stopped
// one stays stopped.
func (a *AWS) Stop(ctx context.Context, d provision.Deployment) error {
	return a.stop(ctx, d, provision.VerbStop)
}

// Hibernate stops a running instance launched with hibernation enabled,
// keeping its memory on its root volume, and waits until it is stopped.
func (a *AWS) Hibernate(ctx context.Context, d provision.Deployment) error {
	return a.stop(ctx, d, provision.VerbHibernate)
}

func (a *AWS) stop(ctx context.Context, d provision.Deployment, verb string) error {
	if err := a.CheckVerb(d, verb); err != nil {
		return fmt.Errorf("%s %s: %w", verb, d.Name, err)
	}
	inst, err := a.lookup(ctx, d)
	if err != nil {
		return fmt.Errorf("%s %s: %w", verb, d.Name, err)
	}
	if err := checkInstance(d.Name, verb, inst); err != nil {
		return fmt.Errorf("%s %s: %w", verb, d.Name, err)
	}
	hibernate := verb == provision.VerbHibernate
	want := provision.StateStopped
	if hibernate {
		want = provision.StateHibernated
	}
	switch st := stateOf(inst); {
	case st == want, st == provision.StateStopping:
	case st == provision.StateHibernated && !hibernate:
		return nil // stopped already, its memory kept
	case st == provision.StateRunning:
		in := &ec2.StopInstancesInput{InstanceIds: []string{d.ResourceID}}
		if hibernate {
			in.Hibernate = awssdk.Bool(true)
		}
		if _, err := a.ec2.StopInstances(ctx, in); err != nil {
			return fmt.Errorf("%s %s: %w", verb, d.Name, classify(err))
		}
	default:
		return fmt.Errorf("%s %s: %w", verb, d.Name, wrongState(inst, verb, "a running"))
	}
	return a.await(ctx, d, verb, want, provision.StateRunning, provision.StateStopping)
}

// Reboot reboots a running instance; it stays running (provision.Do
// refuses a stopped one, as EC2 does).
func (a *AWS) Reboot(ctx context.Context, d provision.Deployment) error {
	id, err := resourceID(d)
	if err != nil {
		return err
	}
	if _, err := a.ec2.RebootInstances(ctx, &ec2.RebootInstancesInput{InstanceIds: []string{id}}); err != nil {
		return fmt.Errorf("reboot %s: %w", d.Name, classify(err))
	}
	return nil
}

// Terminate terminates the instance and waits until EC2 reports it
// terminated; one that is gone already is not an error.
func (a *AWS) Terminate(ctx context.Context, d provision.Deployment) error {
	if err := a.Destroy(ctx, d); err != nil {
		return err
	}
	return a.await(ctx, d, "terminate", provision.StateTerminated,
		provision.StateRunning, provision.StatePending, provision.StateStopping, provision.StateStopped, provision.StateHibernated, provision.StateShuttingDown)
}

// State maps EC2's instance state one to one, except that an instance
// stopped by hibernation is hibernated; an instance EC2 no longer knows
// is terminated.
func (a *AWS) State(ctx context.Context, d provision.Deployment) (string, error) {
	st, _, err := a.StateReason(ctx, d)
	return st, err
}

// StateReason is State with EC2's reason for it, in words a person can
// act on: a spot instance AWS took back, a launch that failed, a machine
// shut down from inside. The reason is empty for a running machine.
func (a *AWS) StateReason(ctx context.Context, d provision.Deployment) (state, reason string, err error) {
	inst, err := a.lookup(ctx, d)
	if errdefs.IsNotFound(err) {
		return provision.StateTerminated, "EC2 no longer knows instance " + d.ResourceID, nil
	}
	if err != nil {
		return "", "", fmt.Errorf("state of %s: %w", d.Name, err)
	}
	st := stateOf(inst)
	if st == provision.StateRunning || st == provision.StatePending {
		return st, "", nil
	}
	return st, reasonOf(inst), nil
}

func stateOf(inst types.Instance) string {
	if inst.State == nil {
		return provision.StatePending
	}
	switch inst.State.Name {
	case types.InstanceStateNamePending:
		return provision.StatePending
	case types.InstanceStateNameRunning:
		return provision.StateRunning
	case types.InstanceStateNameStopping:
		return provision.StateStopping
	case types.InstanceStateNameStopped:
		if inst.StateReason != nil && awssdk.ToString(inst.StateReason.Code) == reasonHibernate {
			return provision.StateHibernated
		}
		return provision.StateStopped
	case types.InstanceStateNameShuttingDown:
		return provision.StateShuttingDown
	case types.InstanceStateNameTerminated:
		return provision.StateTerminated
	}
	return provision.StatePending
}

// reasonOf says why the instance is in its state, from EC2's state reason
// (and its transition reason when there is none).
func reasonOf(inst types.Instance) string {
	var code, msg string
	if inst.StateReason != nil {
		code, msg = awssdk.ToString(inst.StateReason.Code), awssdk.ToString(inst.StateReason.Message)
	}
	// EC2's messages repeat the code: "Server.SpotInstanceTermination:
	// Spot instance termination".
	msg = strings.TrimPrefix(msg, code+": ")
	spot := inst.InstanceLifecycle == types.InstanceLifecycleTypeSpot
	switch {
	case code == reasonSpotEnded || (spot && strings.HasPrefix(code, "Server.") && inst.State.Name != types.InstanceStateNameStopped):
		return fmt.Sprintf("AWS took the spot instance back (%s: %s): EC2 needed the capacity, or the spot price rose above max_price; provision again, or use on-demand (extra.spot false) for a machine that must stay", code, msg)
	case code == reasonSpotStopped || (spot && strings.HasPrefix(code, "Server.")):
		return fmt.Sprintf("AWS stopped the spot instance (%s: %s): EC2 needed the capacity back", code, msg)
	case code == "Server.InsufficientInstanceCapacity":
		return fmt.Sprintf("EC2 had no capacity for instance type %s (%s): try another instance type or zone", inst.InstanceType, code)
	case code == reasonHibernate:
		return "hibernated by a user (" + code + ")"
	case code == "Client.UserInitiatedShutdown":
		return "stopped or terminated by a user through the EC2 API (" + code + ")"
	case code == "Client.InstanceInitiatedShutdown":
		return "the instance shut itself down from inside (" + code + ")"
	case code != "":
		return code + ": " + msg
	}
	if r := awssdk.ToString(inst.StateTransitionReason); r != "" {
		return r
	}
	return ""
}

// wrongState is the conflict of a verb that the instance's state does not
// allow.
func wrongState(inst types.Instance, verb, want string) error {
	st := stateOf(inst)
	hint := ""
	switch st {
	case provision.StateStopping:
		hint = "; wait until it is stopped"
	case provision.StatePending:
		hint = "; wait until it runs"
	case provision.StateShuttingDown, provision.StateTerminated:
		hint = "; it is gone for good: provision a new machine"
	}
	return errdefs.Conflict("instance %s is %s, and EC2 can %s only %s instance%s", awssdk.ToString(inst.InstanceId), st, verb, want, hint)
}

// lookup describes the deployment's instance; a missing one is an
// errdefs.ErrNotFound.
func (a *AWS) lookup(ctx context.Context, d provision.Deployment) (types.Instance, error) {
	id, err := resourceID(d)
	if err != nil {
		return types.Instance{}, err
	}
	return a.describe(ctx, id)
}

// await polls the instance until its state is want, passing through the
// states via at most, for the wait timeout at most.
func (a *AWS) await(ctx context.Context, d provision.Deployment, verb, want string, via ...string) error {
	wctx, cancel := context.WithTimeout(ctx, a.waitTimeout)
	defer cancel()
	for {
		st, reason, err := a.StateReason(wctx, d)
		if err != nil && wctx.Err() == nil {
			return fmt.Errorf("%s %s: %w", verb, d.Name, err)
		}
		if err == nil {
			if st == want {
				return nil
			}
			if !slices.Contains(via, st) {
				if reason != "" {
					reason = ": " + reason
				}
				return errdefs.Conflict("%s %s: instance %s became %s, not %s%s", verb, d.Name, d.ResourceID, st, want, reason)
			}
		}
		select {
		case <-wctx.Done():
			if ctx.Err() != nil {
				return fmt.Errorf("%s %s: %w", verb, d.Name, ctx.Err())
			}
			return errdefs.Class(fmt.Errorf("%s %s: instance %s is %s, not %s, after %v", verb, d.Name, d.ResourceID, st, want, a.waitTimeout), errdefs.ErrUnavailable)
		case <-time.After(a.pollInterval):
		}
	}
}

// NoticeEndpoint is the instance metadata service for a spot instance's
// agent: EC2 posts the two-minute interruption notice and rebalance
// recommendations there, and the instance cannot be told otherwise. An
// on-demand instance gets none (EC2 does not take it back).
func (a *AWS) NoticeEndpoint(d provision.Deployment) string {
	if !spotOf(d.Extra) {
		return ""
	}
	return imds.DefaultEndpoint
}
