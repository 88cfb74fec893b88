package workerproto

import (
	"fmt"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/api"
)

// benchTaskFrame is a Task frame of 4 tasks, as a worker that fetches a
// few at a time gets them.
func benchTaskFrame() Frame {
	now := time.Date(2025, 1, 2, 3, 4, 5, 6, time.UTC)
	task := func(i int) *api.Task {
		return &api.Task{ID: fmt.Sprintf("t-%08d-0123456789abcdef", i), SuiteID: "s-0123456789abcdef",
			TaskSpec: api.TaskSpec{Argv: []string{"/bin/sh", "-c", "echo hello world; exit 0"}, Env: map[string]string{"A": "1"}},
			State:    "running", Attempt: 1, Failures: []api.TaskFailure{}, CreatedAt: now, UpdatedAt: now}
	}
	return Frame{Op: OpTask, Task: &TaskFrame{Task: task(0), More: []*api.Task{task(1), task(2), task(3)}}}
}

func BenchmarkEncode(b *testing.B) {
	f := benchTaskFrame()
	b.ReportAllocs()
	var buf []byte
	for b.Loop() {
		var err error
		if buf, err = encode(buf[:0], f); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(int64(len(buf)))
}

func BenchmarkDecode(b *testing.B) {
	line, err := encode(nil, benchTaskFrame())
	if err != nil {
		b.Fatal(err)
	}
	line = line[:len(line)-1]
	b.SetBytes(int64(len(line)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := decode(line); err != nil {
			b.Fatal(err)
		}
	}
}
