package server

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
)

// agentSession is a bare agent connection for a test: requests one at a
// time, pushes skipped.
type agentSession struct {
	t  *testing.T
	c  *websocket.Conn
	id uint64
}

func (ts *testServer) connect(t *testing.T, cred string) *agentSession {
	t.Helper()
	c, _, err := websocket.Dial(t.Context(), "ws"+strings.TrimPrefix(ts.http.URL, "http")+"/v1/agent/connect",
		&websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + cred}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.CloseNow() })
	return &agentSession{t: t, c: c}
}

// call sends a request and returns its answer's body, or its error.
func (a *agentSession) call(method string, req any) (json.RawMessage, *api.Error) {
	a.t.Helper()
	ctx, cancel := context.WithTimeout(a.t.Context(), 10*time.Second)
	defer cancel()
	a.id++
	body, _ := json.Marshal(req)
	f, _ := json.Marshal(api.Frame{V: 1, Type: api.FrameRequest, ID: a.id, Method: method, Body: body})
	if err := a.c.Write(ctx, websocket.MessageText, f); err != nil {
		a.t.Fatal(err)
	}
	for {
		_, b, err := a.c.Read(ctx)
		if err != nil {
			a.t.Fatalf("%s: read: %v", method, err)
		}
		var r api.Frame
		json.Unmarshal(b, &r)
		if r.Type == api.FrameResponse && r.ID == a.id {
			return r.Body, r.Error
		}
	}
}

// TestNoticesDrainTheNode: an agent that tells of a spot interruption
// gets no suite and no task, and the node shows the notice and why; a
// hello without notices (the machine was stopped and started again)
// forgets them. Bad notices are refused, naming the field.
func TestNoticesDrainTheNode(t *testing.T) {
	ts := newTestServer(t)
	ctx := t.Context()
	id, cred := ts.nodeNamed(t, "spotty")
	su := store.Suite{ID: "s-n", Spec: api.SuiteSpec{Name: "n", WorkerSchedule: api.WorkerSchedule{WorkerCount: 1}},
		State: api.SuiteOpen, Owner: "admin", CreatedAt: time.Now()}
	if err := ts.store.CreateSuite(ctx, su); err != nil {
		t.Fatal(err)
	}
	if err := ts.store.AddTasks(ctx, su.ID, []store.Task{{ID: "k-1", Spec: api.TaskSpec{Argv: []string{"true"}}}}); err != nil {
		t.Fatal(err)
	}

	a := ts.connect(t, cred)
	bad := api.Hello{Name: "spotty", State: api.AgentIdle, Notices: []api.Notice{{Kind: "meteor", Time: time.Now()}}}
	if _, e := a.call(api.MethodHello, bad); e == nil || e.Field != "notices[0].kind" {
		t.Errorf("hello with a notice of no known kind = %+v, want refused on notices[0].kind", e)
	}
	if _, e := a.call(api.MethodHello, api.Hello{Name: "spotty", State: api.AgentIdle}); e != nil {
		t.Fatalf("hello: %+v", e)
	}
	at := time.Now().Add(2 * time.Minute).UTC().Truncate(time.Second)
	notice := api.Notice{Kind: api.NoticeInterruption, Action: "terminate", Time: at}
	if _, e := a.call(api.MethodNotices, api.Notices{Notices: []api.Notice{notice}}); e != nil {
		t.Fatalf("notices: %+v", e)
	}

	var next api.SuiteNext
	if b, e := a.call(api.MethodSuiteNext, struct{}{}); e != nil || json.Unmarshal(b, &next) != nil || next.Suite != nil {
		t.Errorf("suite.next of a draining node = %+v, %+v; want no suite", next.Suite, e)
	}
	var fetched api.TasksFetched
	if b, e := a.call(api.MethodTasksFetch, api.TasksFetch{SuiteID: su.ID, Max: 4}); e != nil || json.Unmarshal(b, &fetched) != nil ||
		len(fetched.Tasks) != 0 || fetched.Yield == "" {
		t.Errorf("tasks.fetch of a draining node = %d tasks, yield %q, %+v; want none and a yield", len(fetched.Tasks), fetched.Yield, e)
	}
	var n api.Node
	ts.mustCall(t, http.StatusOK, ts.admin, "GET", "/v1/nodes/"+id, nil, &n)
	if n.StatusReason != notice.Message() || len(n.Notices) != 1 || !n.Notices[0].Time.Equal(at) {
		t.Errorf("node show: reason %q, notices %+v; want %q and the notice", n.StatusReason, n.Notices, notice.Message())
	}

	a.c.Close(websocket.StatusNormalClosure, "")
	b := ts.connect(t, cred)
	if _, e := b.call(api.MethodHello, api.Hello{Name: "spotty", State: api.AgentIdle}); e != nil {
		t.Fatalf("hello again: %+v", e)
	}
	n = api.Node{}
	ts.mustCall(t, http.StatusOK, ts.admin, "GET", "/v1/nodes/"+id, nil, &n)
	if len(n.Notices) != 0 {
		t.Errorf("after a hello without notices the node shows %+v, want none", n.Notices)
	}
	if b, e := b.call(api.MethodSuiteNext, struct{}{}); e != nil || json.Unmarshal(b, &next) != nil || next.Suite == nil {
		t.Errorf("suite.next of the node back to work = %+v, %+v; want suite n", next.Suite, e)
	}
}
