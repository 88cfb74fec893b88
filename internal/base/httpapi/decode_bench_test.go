package httpapi

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/api"
)

// BenchmarkDecodeStrict decodes what agents send most: a batch of 32
// task reports.
func BenchmarkDecodeStrict(b *testing.B) {
	var r api.TasksReport
	for i := range 32 {
		r.Reports = append(r.Reports, api.TaskReport{TaskID: fmt.Sprintf("t-%08d-0123456789abcdef", i), Attempt: 1, Outcome: api.OutcomeSucceeded,
			Result: api.TaskResult{Stdout: "hello world\n", DurationMS: 12, NodeID: "n-0123456789", FinishedAt: time.Date(2025, 1, 2, 3, 4, 5, 6, time.UTC)}})
	}
	body, err := json.Marshal(r)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		var got api.TasksReport
		if err := DecodeStrict(body, &got); err != nil {
			b.Fatal(err)
		}
	}
}
