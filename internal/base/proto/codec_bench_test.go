package proto

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/api"
)

// benchFrame is the frame the dispatch path sends most bytes in: the
// answer to tasks.fetch, 32 tasks.
func benchFrame(b *testing.B) (api.Frame, []byte) {
	now := time.Date(2025, 1, 2, 3, 4, 5, 6, time.UTC)
	var fetched api.TasksFetched
	for i := range 32 {
		fetched.Tasks = append(fetched.Tasks, api.Task{
			ID: fmt.Sprintf("t-%08d-0123456789abcdef", i), SuiteID: "s-0123456789abcdef",
			TaskSpec: api.TaskSpec{Argv: []string{"/bin/sh", "-c", "echo hello world; exit 0"}, Env: map[string]string{"A": "1"}, Workdir: "/tmp/work"},
			State:    "running", Attempt: 1, NodeID: "n-0123456789", Failures: []api.TaskFailure{}, CreatedAt: now, UpdatedAt: now,
		})
	}
	body, err := json.Marshal(fetched)
	if err != nil {
		b.Fatal(err)
	}
	f := api.Frame{V: api.ProtocolVersion, Type: api.FrameResponse, ID: 123456, Body: body}
	msg, err := json.Marshal(f)
	if err != nil {
		b.Fatal(err)
	}
	return f, msg
}

func BenchmarkDecodeFrame(b *testing.B) {
	_, msg := benchFrame(b)
	b.SetBytes(int64(len(msg)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := decodeFrame(msg); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEncodeFrame(b *testing.B) {
	f, msg := benchFrame(b)
	b.SetBytes(int64(len(msg)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := encodeFrame(f); err != nil {
			b.Fatal(err)
		}
	}
}
