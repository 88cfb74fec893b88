package server

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/coordinator/dispatch"
)

func TestDecodeTaskBatch(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		want       int    // tasks, when no error
		field      string // the field the error names
	}{
		{"two tasks", `{"tasks": [{"argv": ["true"]}, {"argv": ["echo", "hi"], "env": {"A": "1"}}]}`, 2, ""},
		{"empty object", `{}`, 0, "tasks"},
		{"empty list", `{"tasks": []}`, 0, "tasks"},
		{"unknown top-level key", `{"taskz": []}`, 0, "taskz"},
		{"unknown task field", `{"tasks": [{"argv": ["true"]}, {"argvs": ["x"]}]}`, 0, "tasks[1].argvs"},
		{"wrong type", `{"tasks": [{"argv": "true"}]}`, 0, "tasks[0].argv"},
		{"invalid task", `{"tasks": [{"argv": []}]}`, 0, "tasks[0].argv"},
		{"tasks twice", `{"tasks": [{"argv": ["a"]}], "tasks": [{"argv": ["b"]}]}`, 0, "tasks"},
		{"not an array", `{"tasks": {"argv": ["true"]}}`, 0, "tasks"},
		{"trailing data", `{"tasks": [{"argv": ["true"]}]} {}`, 0, "body"},
		{"truncated", `{"tasks": [{"argv": ["true"]}`, 0, "tasks"},
		{"not an object", `[]`, 0, "body"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dec := json.NewDecoder(strings.NewReader(tc.body))
			dec.DisallowUnknownFields()
			tasks, err := decodeTaskBatch(dec)
			if tc.field == "" {
				if err != nil || len(tasks) != tc.want {
					t.Fatalf("decodeTaskBatch(%s) = %d tasks, %v; want %d, nil", tc.body, len(tasks), err, tc.want)
				}
				return
			}
			var fe *errdefs.FieldError
			if !errors.As(err, &fe) || !strings.HasPrefix(fe.Field, tc.field) {
				t.Errorf("decodeTaskBatch(%s) = %v, want an error naming %s", tc.body, err, tc.field)
			}
		})
	}
}

func TestDecodeTaskBatchCapsTheCount(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"tasks": [`)
	for i := range dispatch.MaxTasksPerCall + 1 {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString(`{"argv": ["true"]}`)
	}
	b.WriteString(`]}`)
	_, err := decodeTaskBatch(json.NewDecoder(strings.NewReader(b.String())))
	if err == nil || !strings.Contains(err.Error(), "at most") {
		t.Errorf("a batch of %d tasks = %v, want the per-call cap", dispatch.MaxTasksPerCall+1, err)
	}
}

// TestSubmitTooLarge: a batch over the limit is 413 and adds nothing.
func TestSubmitTooLarge(t *testing.T) {
	ts := newTestServer(t)
	var su api.Suite
	ts.mustCall(t, http.StatusCreated, ts.admin, "POST", "/v1/suites", api.SuiteSpec{Name: "s", WorkerSchedule: api.WorkerSchedule{WorkerCount: 1}}, &su)
	arg := strings.Repeat("x", 100<<10) // each task within its own limits
	var b strings.Builder
	b.WriteString(`{"tasks": [`)
	for i := range maxTaskBody/(100<<10) + 10 {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString(`{"argv": ["echo", "` + arg + `"]}`)
	}
	b.WriteString(`]}`)
	resp, _ := ts.send(t, ts.admin, "POST", "/v1/suites/"+su.ID+"/tasks", "", strings.NewReader(b.String()))
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("a %d MiB batch = %d, want 413", b.Len()>>20, resp.StatusCode)
	}
	var got api.Suite
	ts.mustCall(t, http.StatusOK, ts.admin, "GET", "/v1/suites/"+su.ID, nil, &got)
	if got.Counts.Ready != 0 {
		t.Errorf("after a refused batch the suite has %d ready tasks, want 0", got.Counts.Ready)
	}
}
