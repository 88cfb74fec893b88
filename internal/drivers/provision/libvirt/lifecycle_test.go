package libvirt

import (
	"strings"
	"testing"

	golibvirt "github.com/digitalocean/go-libvirt"

	"github.com/nodemgr/nodemgr/internal/drivers/provision"
)

func TestStateFor(t *testing.T) {
	for _, tc := range []struct {
		st     golibvirt.DomainState
		reason int32
		saved  bool
		want   string
		why    string // a substring; "" for none
	}{
		{golibvirt.DomainRunning, 1, false, provision.StateRunning, ""},
		{golibvirt.DomainBlocked, 0, false, provision.StateRunning, ""},
		{golibvirt.DomainShutdown, 1, false, provision.StateStopping, ""},
		{golibvirt.DomainShutoff, int32(golibvirt.DomainShutoffShutdown), false, provision.StateStopped, ""},
		{golibvirt.DomainShutoff, int32(golibvirt.DomainShutoffDestroyed), false, provision.StateStopped, ""},
		{golibvirt.DomainShutoff, int32(golibvirt.DomainShutoffSaved), true, provision.StateHibernated, ""},
		{golibvirt.DomainShutoff, int32(golibvirt.DomainShutoffCrashed), false, provision.StateStopped, "crashed"},
		{golibvirt.DomainShutoff, int32(golibvirt.DomainShutoffFailed), false, provision.StateStopped, "failed to start"},
		{golibvirt.DomainCrashed, 1, false, provision.StateStopped, "crashed"},
		{golibvirt.DomainPaused, int32(golibvirt.DomainPausedUser), false, provision.StateHibernated, ""},
		{golibvirt.DomainPaused, int32(golibvirt.DomainPausedStartingUp), false, provision.StatePending, ""},
		{golibvirt.DomainPaused, int32(golibvirt.DomainPausedSave), false, provision.StateStopping, ""},
		{golibvirt.DomainPaused, int32(golibvirt.DomainPausedIoerror), false, provision.StateHibernated, "I/O error"},
		{golibvirt.DomainPmsuspended, 0, false, provision.StateHibernated, "suspended itself"},
		{golibvirt.DomainNostate, 0, false, provision.StatePending, ""},
	} {
		got, why := stateFor(tc.st, tc.reason, tc.saved)
		if got != tc.want || (tc.why == "") != (why == "") || !strings.Contains(why, tc.why) {
			t.Errorf("stateFor(%v, %d, saved %v) = %q, %q; want %q, %q", tc.st, tc.reason, tc.saved, got, why, tc.want, tc.why)
		}
	}
}
