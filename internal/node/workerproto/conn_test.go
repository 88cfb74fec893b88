package workerproto

import (
	"errors"
	"io"
	"net"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nodemgr/nodemgr/api"
)

func TestRoundTrip(t *testing.T) {
	a, b := net.Pipe()
	ca, cb := NewConn(a), NewConn(b)
	frames := []Frame{
		{Op: OpHello, Hello: &Hello{Version: Version, WorkerID: 3, Token: "tok", PID: 42}},
		{Op: OpFetch},
		{Op: OpTask, Task: &TaskFrame{Task: &api.Task{ID: "t1", TaskSpec: api.TaskSpec{Argv: []string{"echo", "hi\nthere"}}}}},
		{Op: OpTask, Task: &TaskFrame{Done: true}},
		{Op: OpReport, Report: &Report{api.TaskReport{TaskID: "t1", Outcome: api.OutcomeSucceeded,
			Result: api.TaskResult{Stdout: strings.Repeat("x", 100<<10)}}}},
		{Op: OpCancel, Cancel: &Cancel{TaskID: "t1", Reason: "timeout"}},
	}
	go func() {
		for _, f := range frames {
			if err := ca.Write(f); err != nil {
				t.Errorf("Write(%s) = %v", f.Op, err)
			}
		}
		ca.Close()
	}()
	for _, want := range frames {
		got, err := cb.Read()
		if err != nil {
			t.Fatalf("Read = %v, want a %s frame", err, want.Op)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("Read mismatch (-want +got):\n%s", diff)
		}
	}
	if _, err := cb.Read(); err != io.EOF {
		t.Errorf("Read after close = %v, want io.EOF", err)
	}
}

func TestReadErrors(t *testing.T) {
	cases := []struct {
		name string
		in   string
		want error
	}{
		{"not json", "{nope\n", ErrMalformed},
		{"no op", `{"hello":{}}` + "\n", ErrMalformed},
		{"wrong type", `{"op":7}` + "\n", ErrMalformed},
		{"too long", `{"op":"fetch","x":"` + strings.Repeat("a", MaxFrame) + "\"}\n", ErrMalformed},
		{"cut short", `{"op":"fet`, io.ErrUnexpectedEOF},
		{"empty", "", io.EOF},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a, b := net.Pipe()
			go func() {
				a.Write([]byte(tc.in))
				a.Close()
			}()
			_, err := NewConn(b).Read()
			if !errors.Is(err, tc.want) {
				t.Errorf("Read = %v, want %v", err, tc.want)
			}
		})
	}
}

func TestRunAsRoundTrip(t *testing.T) {
	tests := []struct {
		uid, gid uint32
		groups   []uint32
		text     string
	}{
		{995, 995, nil, "995:995"},
		{65534, 65534, []uint32{27, 100}, "65534:65534:27,100"},
	}
	for _, tc := range tests {
		if got := FormatRunAs(tc.uid, tc.gid, tc.groups); got != tc.text {
			t.Errorf("FormatRunAs(%d, %d, %v) = %q, want %q", tc.uid, tc.gid, tc.groups, got, tc.text)
		}
		uid, gid, groups, err := ParseRunAs(tc.text)
		if err != nil || uid != tc.uid || gid != tc.gid || len(groups) != len(tc.groups) {
			t.Errorf("ParseRunAs(%q) = %d, %d, %v, %v", tc.text, uid, gid, groups, err)
		}
	}
	for _, bad := range []string{"", "995", "a:b", "1:2:3:4", "1:2:x", "-1:2"} {
		if _, _, _, err := ParseRunAs(bad); err == nil {
			t.Errorf("ParseRunAs(%q) = nil error, want one", bad)
		}
	}
}
