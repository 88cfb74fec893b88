package container

import (
	"testing"

	"github.com/moby/moby/api/types/container"

	"github.com/nodemgr/nodemgr/api"
)

// TestObserve maps what the engine says of a container onto a job status:
// DEAD only for the engine's verdicts (out of memory, dead); a container
// removed behind the agent's back is FAILED, saying so.
func TestObserve(t *testing.T) {
	exited := func(code int, oom bool) container.InspectResponse {
		return container.InspectResponse{State: &container.State{Status: container.StateExited, ExitCode: code, OOMKilled: oom}}
	}
	tests := []struct {
		name       string
		insp       container.InspectResponse
		gone, oom  bool
		wantStatus string
		wantReason string
	}{
		{"removed outside", container.InspectResponse{}, true, false, api.ContainerFailed, "removed outside nodemgr: the engine no longer has the container"},
		{"out of memory", exited(137, true), false, false, api.ContainerDead, "out of memory"},
		{"killed", exited(137, false), false, false, api.ContainerFailed, "exit code 137: killed by SIGKILL"},
		{"completed", exited(0, false), false, false, api.ContainerCompleted, ""},
		{"running", container.InspectResponse{State: &container.State{Status: container.StateRunning}}, false, false, api.ContainerRunning, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := observe(tc.insp, tc.gone, tc.oom)
			if o.status != tc.wantStatus || o.reason != tc.wantReason {
				t.Errorf("observe(gone %v) = %s (%q), want %s (%q)", tc.gone, o.status, o.reason, tc.wantStatus, tc.wantReason)
			}
		})
	}
}
