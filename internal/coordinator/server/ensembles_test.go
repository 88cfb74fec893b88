package server

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/api"
)

// TestOfflineReplicas: while a node is offline, an ensemble's replica
// there and its container show UNKNOWN, not the RUNNING last reported.
func TestOfflineReplicas(t *testing.T) {
	ts := newTestServer(t)
	id, _ := ts.nodeNamed(t, "n1")
	if _, err := ts.store.SetNodeStatus(t.Context(), id, api.StatusOffline, "test"); err != nil {
		t.Fatal(err)
	}
	job := api.ContainerJob{ID: "shop-db-1", Name: "db", Image: "postgres:16"}
	if err := ts.store.PutContainers(t.Context(), id, []api.Container{{Job: job, Node: id, Status: api.ContainerRunning, CreatedAt: time.Now()}}); err != nil {
		t.Fatal(err)
	}
	spec := api.EnsembleSpec{Name: "shop", Allocations: []api.AllocationSpec{{Name: "db",
		Resources: api.Resources{CPUs: 0.5, MemoryMB: 64}, Container: &api.ContainerJob{Image: "postgres:16"}}}}
	e := api.Ensemble{ID: "e-1", Name: "shop", Spec: spec, State: api.EnsembleRunning, Owner: "admin",
		Replicas: []api.EnsembleReplica{{Allocation: "db", Replica: 1, NodeID: id, NodeName: "n1", Container: job.ID, Status: api.ContainerRunning}}}
	if err := ts.store.CreateEnsemble(t.Context(), e); err != nil {
		t.Fatal(err)
	}

	var got api.Ensemble
	ts.mustCall(t, http.StatusOK, ts.admin, "GET", "/v1/ensembles/shop", nil, &got)
	if len(got.Replicas) != 1 || got.Replicas[0].Status != api.ContainerUnknown || got.State != api.EnsembleDegraded {
		t.Errorf("GET ensemble = %s, replicas %+v; want degraded with the replica %s", got.State, got.Replicas, api.ContainerUnknown)
	}
	var list api.ContainerList
	ts.mustCall(t, http.StatusOK, ts.admin, "GET", "/v1/containers", nil, &list)
	if len(list.Containers) != 1 || list.Containers[0].Status != api.ContainerUnknown || !strings.Contains(list.Containers[0].Reason, "last reported running") {
		t.Errorf("GET containers = %+v, want one %s saying it was last reported running", list.Containers, api.ContainerUnknown)
	}
	var c api.Container
	ts.mustCall(t, http.StatusOK, ts.admin, "GET", "/v1/containers/"+job.ID, nil, &c)
	if c.Status != api.ContainerUnknown {
		t.Errorf("GET container = %s, want %s", c.Status, api.ContainerUnknown)
	}
}
