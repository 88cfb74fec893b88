package ui_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/google/go-cmp/cmp"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/client"
	"github.com/nodemgr/nodemgr/internal/base/proto"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
)

// overlayAgent speaks the agent protocol to the test's server as an agent
// started with --overlay does: it registers, says hello and joins the
// overlay, and its local API answers GET /v1/overlay with what the test
// sets. There is no WireGuard under it: the dashboard shows what the
// agent says.
type overlayAgent struct {
	t      *testing.T
	id     string
	peer   *proto.Peer
	state  api.OverlayState // the join's answer
	cancel context.CancelFunc
	done   chan struct{}

	mu     sync.Mutex
	device api.LocalResponse
}

// startOverlayAgent registers node name in groups and puts it on the
// overlay with endpoint.
func (e *env) startOverlayAgent(t *testing.T, name, endpoint string, groups ...string) *overlayAgent {
	t.Helper()
	ctx := t.Context()
	jt, err := e.api.CreateJoinToken(ctx, api.CreateTokenRequest{Groups: groups})
	if err != nil {
		t.Fatal(err)
	}
	var reg api.RegisterResponse
	err = client.New(e.url, jt.Secret).Do(ctx, http.MethodPost, "/v1/agent/register", api.RegisterRequest{
		MachineID: "machine-" + name, DataDir: "/var/lib/nodemgr", Name: name, Groups: groups,
		Hardware: api.Hardware{Cores: 2, MemoryBytes: 1 << 30}}, &reg)
	if err != nil {
		t.Fatalf("register %s: %v", name, err)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(e.url, "http")+"/v1/agent/connect",
		&websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + reg.Credential}}})
	if err != nil {
		cancel()
		t.Fatalf("connect %s: %v", name, err)
	}
	a := &overlayAgent{t: t, id: reg.NodeID, cancel: cancel, done: make(chan struct{})}
	a.peer = proto.NewPeer(proto.NewWebSocketConn(c, 1<<20), a, proto.Options{})
	go func() { defer close(a.done); a.peer.Run(runCtx) }()
	t.Cleanup(a.stop)
	a.call(api.MethodHello, api.Hello{Name: name, State: api.AgentIdle, Hardware: api.Hardware{Cores: 2, MemoryBytes: 1 << 30}}, &api.Welcome{})
	key := make([]byte, 32)
	rand.Read(key)
	a.call(api.MethodOverlayJoin, api.OverlayJoin{PublicKey: base64.StdEncoding.EncodeToString(key), ListenPort: 51820,
		Kind: api.OverlayUserspace, Endpoint: endpoint}, &a.state)
	return a
}

func (a *overlayAgent) call(method string, req, resp any) {
	a.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.peer.Call(ctx, method, req, resp); err != nil {
		a.t.Fatalf("%s: %v", method, err)
	}
}

// stop drops the agent's connection, as a node that goes away does.
func (a *overlayAgent) stop() {
	a.cancel()
	<-a.done
}

// answer sets the local API's answer to GET /v1/overlay.
func (a *overlayAgent) answer(status int, body any) {
	a.t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		a.t.Fatal(err)
	}
	a.mu.Lock()
	a.device = api.LocalResponse{Status: status, ContentType: "application/json", Body: b}
	a.mu.Unlock()
}

func (a *overlayAgent) HandleRequest(_ context.Context, method string, body json.RawMessage) (any, error) {
	switch method {
	case api.MethodOverlayState, api.MethodPing, api.MethodWake:
		return struct{}{}, nil
	case api.MethodLocalAPI:
		var req api.LocalRequest
		if err := json.Unmarshal(body, &req); err != nil {
			return nil, err
		}
		if req.Method == http.MethodGet && req.Path == "/v1/overlay" {
			a.mu.Lock()
			defer a.mu.Unlock()
			return a.device, nil
		}
		b, _ := json.Marshal(api.ErrorBody{Error: api.Error{Message: "the test's agent serves GET /v1/overlay only"}})
		return api.LocalResponse{Status: http.StatusNotFound, ContentType: "application/json", Body: b}, nil
	}
	return nil, proto.UnknownMethod(method)
}

func (a *overlayAgent) HandleNotify(context.Context, uint64, string, json.RawMessage) error {
	return nil
}

var (
	rowRE  = regexp.MustCompile(`(?s)<tr[ >].*?</tr>`)
	cellRE = regexp.MustCompile(`(?s)<td[^>]*>(.*?)</td>`)
	tagRE  = regexp.MustCompile(`<[^>]*>`)
)

// tableRows reads the body rows of the table with id in page, as the
// text of their cells.
func tableRows(t *testing.T, page, id string) [][]string {
	t.Helper()
	start := strings.Index(page, `id="`+id+`"`)
	if start < 0 {
		t.Fatalf("the page has no table %s:\n%.3000s", id, page)
	}
	table := page[start:]
	table = table[:strings.Index(table, "</table>")]
	var rows [][]string
	for _, tr := range rowRE.FindAllString(table, -1) {
		var cells []string
		for _, td := range cellRE.FindAllStringSubmatch(tr, -1) {
			cells = append(cells, html.UnescapeString(strings.Join(strings.Fields(tagRE.ReplaceAllString(td[1], " ")), " ")))
		}
		if cells != nil {
			rows = append(rows, cells)
		}
	}
	return rows
}

// TestNetworkPages: the Network page lists the overlay's nodes that the
// user may read, with their addresses, blocks, endpoints and peers; a
// node's page shows its device, names and links as its agent says, and the
// API's error where the agent cannot say.
func TestNetworkPages(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	b := e.browser()
	b.login(e.admin)

	resp, page := b.get("/ui/network")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /ui/network = %d: %.500s", resp.StatusCode, page)
	}
	for _, want := range []string{`href="/ui/network" class="active"`, "100.64.0.0/10", "<code>nodemgr agent --overlay</code>"} {
		if !strings.Contains(page, want) {
			t.Errorf("the empty overlay's page lacks %q", want)
		}
	}

	web1 := e.startOverlayAgent(t, "web-1", "10.0.0.11:51820", "ml")
	web2 := e.startOverlayAgent(t, "web-2", "10.0.0.12:51820", "ml")
	ops := e.startOverlayAgent(t, "ops-1", "10.0.0.13:51820", "ops")

	_, page = b.get("/ui/network")
	want := [][]string{
		{"web-1 " + web1.id, "online", "100.64.0.1", "100.64.0.0/24", "10.0.0.11:51820", "userspace", "web-2"},
		{"web-2 " + web2.id, "online", "100.64.1.1", "100.64.1.0/24", "10.0.0.12:51820", "userspace", "web-1"},
		{"ops-1 " + ops.id, "online", "100.64.2.1", "100.64.2.0/24", "10.0.0.13:51820", "userspace", "none: no group in common with another node on it"},
	}
	if diff := cmp.Diff(want, tableRows(t, page, "network")); diff != "" {
		t.Errorf("the network table (-want +got):\n%s", diff)
	}
	for _, link := range []string{`href="/ui/network/` + web1.id + `">web-1</a>`, `href="/ui/nodes/` + web1.id + `"`, `class="tag" href="/ui/network/` + web2.id + `">web-2</a>`} {
		if !strings.Contains(page, link) {
			t.Errorf("the network page lacks the link %s", link)
		}
	}

	// A reader of ml sees ml's nodes only: the API decides.
	if _, err := e.api.CreateUser(ctx, api.CreateUserRequest{Name: "reader", Groups: map[string]string{"ml": api.RoleRead}}); err != nil {
		t.Fatal(err)
	}
	tk, err := e.api.CreateToken(ctx, api.CreateTokenRequest{User: "reader"})
	if err != nil {
		t.Fatal(err)
	}
	rb := e.browser()
	rb.login(tk.Secret)
	_, page = rb.get("/ui/network")
	if rows := tableRows(t, page, "network"); len(rows) != 2 || strings.Contains(page, "ops-1") {
		t.Errorf("a reader of ml sees %d rows (ops-1 among them: %v), want web-1 and web-2", len(rows), strings.Contains(page, "ops-1"))
	}

	// web-1's agent says what its device sees.
	st := web1.state
	st.Names = map[string][]string{"web.shop.nodemgr": {"100.64.1.2", "100.64.0.2"}, "1.web.shop.nodemgr": {"100.64.0.2"}}
	handshake := time.Now().Add(-3*time.Minute - 10*time.Second)
	web1.answer(http.StatusOK, api.OverlayDevice{Interface: "nodemgr0", Kind: api.OverlayUserspace, PublicKey: "a2V5LW9mLXdlYi0x", ListenPort: 51820,
		State: &st, DNS: "100.64.0.1:53", Links: []api.OverlayLink{
			{PublicKey: "bmV3LXBlZXIta2V5LXdpdGhvdXQtbmFtZQ==", AllowedIPs: []string{"100.64.9.0/24"}},
			{Node: "web-2", PublicKey: "d2ViLTIta2V5", Endpoint: "10.0.0.12:51820", AllowedIPs: []string{"100.64.1.0/24"},
				LastHandshake: &handshake, RxBytes: 1_300_000, TxBytes: 1000},
		}})
	resp, page = b.get("/ui/network/" + web1.id)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /ui/network/%s = %d: %.1000s", web1.id, resp.StatusCode, page)
	}
	for _, want := range []string{`href="/ui/network" class="active"`, "nodemgr0", "userspace WireGuard", "UDP 51820",
		`<dd class="mono">100.64.0.1</dd>`, "100.64.0.0/24", "100.64.0.0/10", "100.64.0.1:53", `href="/ui/nodes/` + web1.id + `"`} {
		if !strings.Contains(page, want) {
			t.Errorf("web-1's overlay page lacks %q", want)
		}
	}
	wantLinks := [][]string{
		{"web-2", "10.0.0.12:51820", "100.64.1.0/24", "3m ago", "1.2 MiB", "1000 B"},
		{"bmV3LXBlZXIt…", "—", "100.64.9.0/24", "never", "0 B", "0 B"},
	}
	if diff := cmp.Diff(wantLinks, tableRows(t, page, "links")); diff != "" {
		t.Errorf("web-1's links (-want +got):\n%s", diff)
	}
	wantNames := [][]string{{"1.web.shop.nodemgr", "100.64.0.2"}, {"web.shop.nodemgr", "100.64.1.2, 100.64.0.2"}}
	if diff := cmp.Diff(wantNames, tableRows(t, page, "overlay-names")); diff != "" {
		t.Errorf("web-1's names (-want +got):\n%s", diff)
	}

	// An agent that cannot say: its own words, in a page that still works.
	const notOn = "no overlay on this node: start its agent with --overlay & <again>"
	web2.answer(http.StatusNotFound, api.ErrorBody{Error: api.Error{Message: notOn}})
	resp, page = b.get("/ui/network/web-2") // by name, as the links are
	if resp.StatusCode != http.StatusOK || !strings.Contains(page, `id="overlay-error">`+html.EscapeString(notOn)+`</p>`) {
		t.Errorf("web-2's page = %d, want 200 with the agent's error %q:\n%.3000s", resp.StatusCode, notOn, page)
	}
	if strings.Contains(page, `id="links"`) {
		t.Error("web-2's page shows links though its agent said none")
	}

	// A node whose agent is gone: the server's error.
	ops.stop()
	var gone error
	waitUntil(t, 5*time.Second, "the API says ops-1 is not connected", func() bool {
		_, gone = e.api.Overlay(ctx, ops.id)
		var ae *client.Error
		return errors.As(gone, &ae) && ae.Status == http.StatusServiceUnavailable
	})
	resp, page = b.get("/ui/network/" + ops.id)
	if resp.StatusCode != http.StatusOK || !strings.Contains(page, "node ops-1 is not connected") || !strings.Contains(page, `id="overlay-error"`) {
		t.Errorf("ops-1's page = %d, want 200 saying it is not connected (the API says %v):\n%.3000s", resp.StatusCode, gone, page)
	}

	if resp, _ := b.get("/ui/network/n-nope"); resp.StatusCode != http.StatusNotFound {
		t.Errorf("an unknown node's overlay page = %d, want 404", resp.StatusCode)
	}
}

// TestNetworkPages50AtATime: the overlay's table pages on the server, as
// every list does.
func TestNetworkPages50AtATime(t *testing.T) {
	e := newEnv(t)
	for i := range 60 {
		id := fmt.Sprintf("n-ovl%05d", i)
		e.addNode(id, fmt.Sprintf("box-%02d", i))
		key := bytes.Repeat([]byte{byte(i + 1)}, 32)
		_, err := e.st.JoinOverlay(t.Context(), store.OverlayMember{NodeID: id, PublicKey: base64.StdEncoding.EncodeToString(key),
			ListenPort: 51820, Endpoint: fmt.Sprintf("10.1.0.%d:51820", i+1), Kind: api.OverlayKernel}, 1<<14)
		if err != nil {
			t.Fatal(err)
		}
	}
	b := e.browser()
	b.login(e.admin)
	next := regexp.MustCompile(`href="([^"]+)" id="next-page"`)
	path, rows, pages := "/ui/network", 0, 0
	for path != "" {
		resp, page := b.get(path)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s = %d", path, resp.StatusCode)
		}
		n := len(tableRows(t, page, "network"))
		if n > 50 {
			t.Fatalf("a page has %d rows, want at most 50", n)
		}
		rows += n
		pages++
		path = ""
		if m := next.FindStringSubmatch(page); m != nil {
			path = html.UnescapeString(m[1])
		}
	}
	if pages != 2 || rows != 60 {
		t.Errorf("paging showed %d rows on %d pages, want 60 on 2", rows, pages)
	}
	if resp, page := b.get("/ui/network?after=n-gone"); resp.StatusCode != http.StatusBadRequest || !strings.Contains(page, "after") {
		t.Errorf("a cursor of a node not on the overlay = %d, want 400 saying so: %.300s", resp.StatusCode, page)
	}
}

// waitUntil polls cond until it holds, or fails the test after timeout.
func waitUntil(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
