package workload

import (
	"testing"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/fuzzcheck"
	"github.com/nodemgr/nodemgr/internal/base/httpapi"
)

// FuzzCheckContainer reads container jobs as the API (JSON, strictly, alone or
// in the seed's {command, job} message) and the CLI (YAML, known fields
// only) do. Validate must refuse with a field error, or pass a job that
// validates again unchanged after a JSON round trip.
func FuzzCheckContainer(f *testing.F) {
	for _, s := range []string{
		`{"name":"web","image":"busybox:1.36","command":["httpd","-f"],"env":{"A":"1"},"cpus":0.5,"memory_mb":64,"ports":[{"container":80},{"container":53,"host":5353,"protocol":"udp"}],"labels":{"team":"a"}}`,
		`{"command":"deploy","job":{"id":"42","name":"web-1","image":"registry.example.com:5000/team/web@sha256:` + "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa" + `"},"cluster":["n1"],"worker":["n2"]}`,
		"name: web\nimage: busybox\nports: [{container: 80}]\ncommitment: c1\n",
		`{"name":"Web","image":"busybox"}`, `{"name":"web","image":"UPPER"}`, `{"name":"web","image":"busybox","cpus":1e308}`,
		`{"name":"web","image":"busybox","cpus":-1}`, `{"name":"web","image":"busybox","memory_mb":5}`,
		`{"name":"web","image":"busybox","ports":[{"container":80},{"container":80}]}`,
		`{"name":"web","image":"busybox","ports":[{"container":0}]}`, `{"name":"web","image":"busybox","labels":{"nodemgr.job":"x"}}`,
		`{"name":"web","image":"busybox","technology":"unikernel"}`, `{}`, "",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var job api.ContainerJob
		if httpapi.DecodeStrict(data, &job) == nil {
			checkJob(t, job)
		}
		var cmd api.ContainerCommand
		if httpapi.DecodeStrict(data, &cmd) == nil {
			checkJob(t, cmd.Job)
		}
		var fromYAML api.ContainerJob
		if fuzzcheck.DecodeYAML(data, &fromYAML) == nil {
			checkJob(t, fromYAML)
		}
	})
}

func checkJob(t *testing.T, job api.ContainerJob) {
	t.Helper()
	fuzzcheck.Check(t, "CheckContainer", job, CheckContainer)
}
