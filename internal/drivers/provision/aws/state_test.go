package aws

import (
	"strings"
	"testing"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/nodemgr/nodemgr/internal/drivers/provision"
)

func TestStateAndReason(t *testing.T) {
	inst := func(state types.InstanceStateName, code string, spot bool) types.Instance {
		i := types.Instance{InstanceId: awssdk.String("i-1"), State: &types.InstanceState{Name: state}, InstanceType: "t3.micro"}
		if code != "" {
			i.StateReason = &types.StateReason{Code: awssdk.String(code), Message: awssdk.String(code + ": what EC2 says")}
		}
		if spot {
			i.InstanceLifecycle = types.InstanceLifecycleTypeSpot
		}
		return i
	}
	tests := []struct {
		name   string
		inst   types.Instance
		state  string
		reason []string // the reason says these; none: it is empty
	}{
		{"running", inst("running", "", false), provision.StateRunning, nil},
		{"pending", inst("pending", "", false), provision.StatePending, nil},
		{"stopping", inst("stopping", "Client.UserInitiatedShutdown", false), provision.StateStopping, []string{"by a user"}},
		{"stopped", inst("stopped", "Client.UserInitiatedShutdown", false), provision.StateStopped, []string{"by a user", "Client.UserInitiatedShutdown"}},
		{"hibernated", inst("stopped", "Client.UserInitiatedHibernate", false), provision.StateHibernated, []string{"hibernated"}},
		{"shut down from inside", inst("stopped", "Client.InstanceInitiatedShutdown", false), provision.StateStopped, []string{"from inside"}},
		{"spot taken back", inst("terminated", "Server.SpotInstanceTermination", true), provision.StateTerminated, []string{"AWS took the spot instance back", "what EC2 says"}},
		{"spot ending", inst("shutting-down", "Server.SpotInstanceTermination", true), provision.StateShuttingDown, []string{"AWS took the spot instance back"}},
		{"spot ended by AWS, another code", inst("terminated", "Server.ScheduledStop", true), provision.StateTerminated, []string{"AWS took the spot instance back", "Server.ScheduledStop"}},
		{"spot stopped by AWS", inst("stopped", "Server.SpotInstanceShutdown", true), provision.StateStopped, []string{"AWS stopped the spot instance"}},
		{"no capacity", inst("terminated", "Server.InsufficientInstanceCapacity", false), provision.StateTerminated, []string{"no capacity for instance type t3.micro", "another instance type or zone"}},
		{"launch failed", inst("terminated", "Server.InternalError", false), provision.StateTerminated, []string{"Server.InternalError: what EC2 says"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := stateOf(tc.inst); got != tc.state {
				t.Errorf("stateOf = %q, want %q", got, tc.state)
			}
			why := reasonOf(tc.inst)
			if tc.reason == nil && why != "" {
				t.Errorf("reasonOf = %q, want none", why)
			}
			for _, w := range tc.reason {
				if !strings.Contains(why, w) {
					t.Errorf("reasonOf = %q, want it to say %q", why, w)
				}
			}
		})
	}
}
