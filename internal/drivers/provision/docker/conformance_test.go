package docker_test

import (
	"testing"

	"github.com/nodemgr/nodemgr/internal/drivers/provision"
	"github.com/nodemgr/nodemgr/internal/drivers/provision/docker/dockertest"
	"github.com/nodemgr/nodemgr/internal/drivers/provision/provisiontest"
)

func TestConformance(t *testing.T) {
	provisiontest.Run(t, func(t *testing.T) provisiontest.Target {
		d, c, img, labels := setup(t)
		return provisiontest.Target{
			Provider: d,
			Spec:     provision.Spec{Extra: map[string]any{"image": img}, Labels: labels},
			Invalid: []provisiontest.Invalid{
				{Extra: map[string]any{"image": 42}, Field: "extra.image"},
				{Extra: map[string]any{"cpu": "lots"}, Field: "extra.cpu"},
				{Extra: map[string]any{"privileged": true}, Field: "extra.privileged"},
				{Extra: map[string]any{"env": []any{"=x"}}, Field: "extra.env[0]"},
			},
			Failures: []provisiontest.Failure{
				// Both fail at start, after the container was made. (A
				// command that exits at once may still run when Provision
				// looks, so it would not fail every time.)
				{Name: "unknown user", Extra: map[string]any{"user": "nosuchuser"}},
				{Name: "no such program", Extra: map[string]any{"entrypoint": []any{"/no/such/program"}}},
			},
			Leftovers: func(t *testing.T, labels map[string]string) []string {
				var out []string
				for _, s := range dockertest.Containers(t, c, labels) {
					out = append(out, s.ID[:12]+" "+s.State)
				}
				return out
			},
		}
	})
}
