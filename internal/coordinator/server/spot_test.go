package server

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
	_ "github.com/nodemgr/nodemgr/internal/drivers/provision/aws"
	"github.com/nodemgr/nodemgr/internal/drivers/provision/aws/ec2test"
)

// A spot instance that AWS takes back shows on its deployment as
// terminated with the provider's reason, not as "removed outside
// nodemgr" (the EC2 fake, since moto has no spot interruptions).
func TestSpotInterruptionShowsOnTheDeployment(t *testing.T) {
	fake := ec2test.New(t)
	s, st, admin := newServer(t, "", Config{ProviderSettings: map[string]map[string]string{"aws": fake.Settings()}})
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	ts := &testServer{Server: s, http: hs, admin: admin}

	tmpl := "name: spot\nimage: " + ec2test.ImageAL2023 + "\ncpu: 2\nmemoryMB: 4096\noverrides:\n  aws:\n    spot: true\n    max_price: \"0.05\"\n"
	if _, err := st.PutDocument(t.Context(), store.Document{Kind: store.KindTemplate, Name: "spot", Body: []byte(tmpl)}); err != nil {
		t.Fatal(err)
	}
	var made api.DeploymentList
	if code, body := ts.call(t, ts.admin, "POST", "/v1/deployments", api.ProvisionRequest{Template: "spot", Provider: "aws"}, &made); code != http.StatusAccepted {
		t.Fatalf("provision = %d %s", code, body)
	}
	var d api.Deployment
	deadline := time.Now().Add(30 * time.Second)
	for d.State != "running" {
		if time.Now().After(deadline) {
			t.Fatalf("deployment never ran: %+v", d)
		}
		time.Sleep(20 * time.Millisecond)
		ts.call(t, ts.admin, "GET", "/v1/deployments/"+made.Deployments[0].ID, nil, &d)
	}
	if err := fake.InterruptSpot(d.ResourceID); err != nil {
		t.Fatal(err)
	}
	for d.State == "running" || d.State == "shutting-down" {
		if time.Now().After(deadline) {
			t.Fatalf("deployment never left running: %+v", d)
		}
		s.catalog.CheckDrift(t.Context())
		ts.call(t, ts.admin, "GET", "/v1/deployments/"+d.ID, nil, &d)
	}
	if d.State != "terminated" || !strings.Contains(d.StateReason, "spot") || strings.Contains(d.StateReason, "outside nodemgr") {
		t.Errorf("interrupted spot deployment: %s (%q), want terminated with the spot reason", d.State, d.StateReason)
	}
}
