package libvirt_test

import (
	"testing"

	"github.com/nodemgr/nodemgr/internal/drivers/provision"
	"github.com/nodemgr/nodemgr/internal/drivers/provision/libvirt/libvirttest"
	"github.com/nodemgr/nodemgr/internal/drivers/provision/provisiontest"
)

// The conformance suite against libvirtd's test driver: real RPC, real
// domain and volume XML, guests that run nothing.
func TestConformance(t *testing.T) {
	provisiontest.Run(t, func(t *testing.T) provisiontest.Target {
		p, conn, labels := setup(t)
		return provisiontest.Target{
			Provider: p,
			Spec:     provision.Spec{Labels: labels, Extra: map[string]any{"base_image": baseVolume(t, conn, 64), "cpu": 1, "memoryMB": 128, "diskGB": 1}},
			Invalid: []provisiontest.Invalid{
				{Extra: map[string]any{"base_image": 42}, Field: "extra.base_image"},
				{Extra: map[string]any{"cpu": "lots"}, Field: "extra.cpu"},
				{Extra: map[string]any{"network_mode": "bridge"}, Field: "extra.network_mode"},
				{Extra: map[string]any{"image_type": "kernel"}, Field: "extra.kernel"},
				{Extra: map[string]any{"arch": "mips"}, Field: "extra.arch"},
			},
			Failures: []provisiontest.Failure{
				// Made the domain and its disk, then fails to write the
				// seed: the test driver has no volume upload.
				{Name: "seed not written", Extra: map[string]any{"user_data": "#cloud-config\n"}},
				{Name: "no such base image", Extra: map[string]any{"base_image": "no-such-base.qcow2"}},
				{Name: "no such network", Extra: map[string]any{"network": "no-such-network"}},
			},
			Leftovers: func(t *testing.T, labels map[string]string) []string {
				return libvirttest.Domains(t, conn, labels)
			},
		}
	})
}
