package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/client"
	"github.com/nodemgr/nodemgr/internal/base/proto"
)

// TestCrossTenantIsolation: group a's suite holds a secret in a task's
// environment and an input file. A writer of group b and group b's own
// node try every path they can reach — the REST API with the user's token,
// a task on the b node that reads what the agent keeps, and the b node's
// credential on the agent protocol and the blob routes. None of them
// yields a's environment, input, output, or a stored report; then a's node
// runs a's task as if nothing had happened.
func TestCrossTenantIsolation(t *testing.T) {
	s := startServer(t)
	ctx := context.Background()
	alice := userIn(t, s, "alice", "a")
	bob := userIn(t, s, "bob", "b")

	// a's suite, its task and its input, while no node of a is up.
	input := filepath.Join(t.TempDir(), "data.txt")
	if err := os.WriteFile(input, []byte("a's confidential input\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	in, _, err := alice.UploadFile(ctx, input, "data.txt")
	if err != nil {
		t.Fatal(err)
	}
	sa, err := alice.CreateSuite(ctx, api.SuiteSpec{Name: "sa", Group: "a", WorkerSchedule: api.WorkerSchedule{WorkerCount: 1}})
	if err != nil {
		t.Fatal(err)
	}
	ids, err := alice.SubmitTasks(ctx, "sa", []api.TaskSpec{{
		Argv:    []string{"sh", "-c", `cat data.txt > out.txt; echo "key=$DEPLOY_KEY"`},
		Env:     map[string]string{"DEPLOY_KEY": "hunter2"},
		Inputs:  []api.TaskFile{in},
		Outputs: []string{"out.txt"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	task := ids[0]

	// b's writer, through the API.
	_, err = bob.CreateSuite(ctx, api.SuiteSpec{Name: "sa", Group: "b", WorkerSchedule: api.WorkerSchedule{WorkerCount: 1}})
	if statusOf(err) != http.StatusConflict || strings.Contains(err.Error(), sa.ID) {
		t.Errorf("b's writer creating a suite named like a's = %v; want 409 that does not name %s", err, sa.ID)
	}
	if _, err := bob.Suite(ctx, sa.ID); statusOf(err) != http.StatusNotFound {
		t.Errorf("b's writer reading a's suite = %v; want 404", err)
	}
	if _, err := bob.Task(ctx, task); statusOf(err) != http.StatusNotFound {
		t.Errorf("b's writer reading a's task = %v; want 404", err)
	}
	if has, err := bob.HasBlob(ctx, in.Digest); has || err != nil {
		t.Errorf("b's writer asking whether a's input exists = %v, %v; want false (as for any absent file)", has, err)
	}
	if code, body := blobGet(t, s, tokenFor(t, s, "bob"), in.Digest); code/100 == 2 || strings.Contains(body, "confidential") {
		t.Errorf("b's writer reading a's input by digest = %d %q; want it refused", code, body)
	}

	// b's node: its tasks cannot read what its agent keeps.
	bNode, _ := startOnline(t, s, "b-node", "--join-token", s.joinToken(t, "b"))
	if _, err := bob.CreateSuite(ctx, api.SuiteSpec{Name: "sb", Group: "b", WorkerSchedule: api.WorkerSchedule{WorkerCount: 1}}); err != nil {
		t.Fatal(err)
	}
	agentPID := bNode.cmd.Process.Pid
	probes, err := bob.SubmitTasks(ctx, "sb", []api.TaskSpec{
		{Argv: []string{"cat", filepath.Join(bNode.dataDir, "agent.json")}},
		{Argv: []string{"cat", fmt.Sprintf("/proc/%d/environ", agentPID)}},
		{Argv: []string{"id", "-u"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bob.CloseSuite(ctx, "sb"); err != nil {
		t.Fatal(err)
	}
	waitSuite(t, s, "sb", api.SuiteComplete, 60*time.Second)
	for i, id := range probes[:2] {
		tk, err := bob.Task(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if tk.State == api.TaskFinished || (tk.Result != nil && strings.Contains(tk.Result.Stdout, "credential")) {
			t.Errorf("b's task %d read what the agent keeps: %s, stdout %q", i, tk.State, tk.Result.Stdout)
		}
	}
	if tk, err := bob.Task(ctx, probes[2]); err != nil || tk.Result == nil || strings.TrimSpace(tk.Result.Stdout) == "0" {
		t.Errorf("b's task runs as uid %q (%v); want an unprivileged user", resultStdout(tk), err)
	}

	// Someone got the b node's credential anyway (here, from its data dir):
	// its agent stops and the credential is used by hand.
	cred := nodeCredential(t, bNode.dataDir)
	bNode.signal(syscall.SIGTERM)
	bNode.wait(30 * time.Second)
	peer := connectAs(t, s, cred)
	for i := range 3 { // inside one second
		var got api.TasksFetched
		if err := peer.Call(ctx, api.MethodTasksFetch, api.TasksFetch{SuiteID: sa.ID, Max: 32}, &got); err != nil {
			t.Fatalf("fetch %d: %v", i, err)
		}
		if len(got.Tasks) != 0 {
			t.Fatalf("b's node fetch %d of a's suite = %+v; want nothing", i, got.Tasks)
		}
	}
	forged := api.TasksReport{Reports: []api.TaskReport{{TaskID: task, Attempt: 1, Outcome: api.OutcomeSucceeded,
		Result: api.TaskResult{Stdout: "forged", Outputs: []api.TaskFile{{Path: "../../escape", Digest: in.Digest, Size: in.Size}}}}}}
	if err := peer.Call(ctx, api.MethodTasksReport, forged, nil); err != nil {
		t.Fatalf("report: %v", err)
	}
	if code, body := blobGet(t, s, cred, in.Digest); code/100 == 2 || strings.Contains(body, "confidential") {
		t.Errorf("b's node reading a's input by digest = %d %q; want it refused", code, body)
	}
	if tk, err := s.client().Task(ctx, task); err != nil || tk.State != api.TaskReady || tk.Attempt != 0 || tk.Result != nil {
		t.Fatalf("a's task after b's node tried it = %s at attempt %d, result %v (%v); want Ready at 0, none", tk.State, tk.Attempt, tk.Result, err)
	}

	// a's own node runs a's task; b still sees none of it.
	startAgent(t, s, "a-node", "--join-token", s.joinToken(t, "a"))
	if _, err := alice.CloseSuite(ctx, "sa"); err != nil {
		t.Fatal(err)
	}
	waitSuite(t, s, "sa", api.SuiteComplete, 60*time.Second)
	tk, err := alice.Task(ctx, task)
	if err != nil || tk.State != api.TaskFinished || !strings.Contains(tk.Result.Stdout, "key=hunter2") || tk.Attempt != 1 {
		t.Fatalf("a's task = %s at attempt %d, stdout %q (%v); want Finished at 1 with its key", tk.State, tk.Attempt, resultStdout(tk), err)
	}
	out, _, err := alice.TaskOutput(ctx, task, "out.txt")
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(out)
	out.Close()
	if string(got) != "a's confidential input\n" {
		t.Errorf("a's output = %q, want its input copied", got)
	}
	if _, _, err := bob.TaskOutput(ctx, task, "out.txt"); statusOf(err) != http.StatusNotFound {
		t.Errorf("b's writer reading a's output = %v; want 404", err)
	}
	var outDigest string
	for _, f := range tk.Result.Outputs {
		outDigest = f.Digest
	}
	if code, _ := blobGet(t, s, cred, outDigest); code/100 == 2 {
		t.Errorf("b's node reading a's output by digest = %d; want it refused", code)
	}
}

// userIn makes a user with Write in group and returns a client with a
// token of theirs.
func userIn(t *testing.T, s *server, name, group string) *client.Client {
	t.Helper()
	if _, err := s.client().CreateUser(context.Background(), api.CreateUserRequest{Name: name, Groups: map[string]string{group: api.RoleWrite}}); err != nil {
		t.Fatal(err)
	}
	return client.New(s.addr, tokenFor(t, s, name))
}

// tokenFor makes a new API token for a user.
func tokenFor(t *testing.T, s *server, user string) string {
	t.Helper()
	tk, err := s.client().CreateToken(context.Background(), api.CreateTokenRequest{User: user})
	if err != nil {
		t.Fatal(err)
	}
	return tk.Secret
}

// blobGet reads a blob by digest with a token or credential.
func blobGet(t *testing.T, s *server, secret, digest string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, s.url()+"/v1/blobs/"+digest, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+secret)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	return resp.StatusCode, string(b)
}

// nodeCredential reads the credential an agent keeps in its data dir.
func nodeCredential(t *testing.T, dataDir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dataDir, "agent.json"))
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		Credential string `json:"credential"`
	}
	if err := json.Unmarshal(b, &st); err != nil || st.Credential == "" {
		t.Fatalf("agent.json holds no credential (%v)", err)
	}
	return st.Credential
}

// connectAs speaks the agent protocol with a node credential, as an agent
// would, and says hello.
func connectAs(t *testing.T, s *server, cred string) *proto.Peer {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	c, _, err := websocket.Dial(ctx, "ws://"+s.addr+"/v1/agent/connect",
		&websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + cred}}})
	if err != nil {
		cancel()
		t.Fatalf("connect with the node's credential: %v", err)
	}
	peer := proto.NewPeer(proto.NewWebSocketConn(c, 1<<20), ignoreServer{}, proto.Options{})
	done := make(chan struct{})
	go func() { defer close(done); peer.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	if err := peer.Call(ctx, api.MethodHello, api.Hello{State: api.AgentIdle, Hardware: api.Hardware{Cores: 1}}, nil); err != nil {
		t.Fatalf("hello: %v", err)
	}
	return peer
}

// ignoreServer answers what a server asks of a hand-driven agent.
type ignoreServer struct{}

func (ignoreServer) HandleRequest(context.Context, string, json.RawMessage) (any, error) {
	return struct{}{}, nil
}
func (ignoreServer) HandleNotify(context.Context, uint64, string, json.RawMessage) error { return nil }

func resultStdout(tk api.Task) string {
	if tk.Result == nil {
		return ""
	}
	return tk.Result.Stdout
}
