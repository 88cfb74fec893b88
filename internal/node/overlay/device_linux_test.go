package overlay

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/nodemgr/nodemgr/internal/base/syncbuf"
)

func TestKernelPeerConfigs(t *testing.T) {
	ka := 25 * time.Second
	changes := []peerChange{
		{key: testKey(1), remove: true},
		{key: testKey(2), create: true, endpoint: netip.MustParseAddrPort("10.0.0.2:51820"), setKeepalive: true, keepalive: ka, setAllowed: true, allowed: pfxs("100.64.2.0/24")},
		{key: testKey(3), setAllowed: true},
	}
	want := []wgtypes.PeerConfig{
		{PublicKey: testKey(1), Remove: true},
		{PublicKey: testKey(2), Endpoint: &net.UDPAddr{IP: net.IPv4(10, 0, 0, 2).To4(), Port: 51820}, PersistentKeepaliveInterval: &ka,
			ReplaceAllowedIPs: true, AllowedIPs: []net.IPNet{{IP: net.IPv4(100, 64, 2, 0).To4(), Mask: net.CIDRMask(24, 32)}}},
		{PublicKey: testKey(3), UpdateOnly: true, ReplaceAllowedIPs: true},
	}
	if diff := cmp.Diff(want, kernelPeerConfigs(changes)); diff != "" {
		t.Errorf("kernelPeerConfigs (-want +got):\n%s", diff)
	}
}

func TestKernelPeers(t *testing.T) {
	hs := time.Unix(1700000000, 0)
	peers := []wgtypes.Peer{
		{PublicKey: testKey(1), Endpoint: &net.UDPAddr{IP: net.ParseIP("10.0.0.1"), Port: 51820}, PersistentKeepaliveInterval: 25 * time.Second,
			LastHandshakeTime: hs, ReceiveBytes: 5, TransmitBytes: 6, AllowedIPs: []net.IPNet{{IP: net.ParseIP("100.64.1.0"), Mask: net.CIDRMask(24, 32)}}},
		{PublicKey: testKey(2), LastHandshakeTime: time.Unix(0, 0)},
	}
	want := []PeerStatus{
		{PublicKey: testKey(1).String(), Endpoint: "10.0.0.1:51820", AllowedIPs: pfxs("100.64.1.0/24"), Keepalive: 25 * time.Second, LastHandshake: hs, RxBytes: 5, TxBytes: 6},
		{PublicKey: testKey(2).String()},
	}
	if diff := cmp.Diff(want, kernelPeers(peers), cmp.Comparer(func(a, b netip.Prefix) bool { return a == b })); diff != "" {
		t.Errorf("kernelPeers (-want +got):\n%s", diff)
	}
}

// helperEnv, set to a key file path, makes the test binary a helper:
// TestMesh and the Mesh benchmarks run it inside a network namespace,
// where it serves one Mesh to the test over stdin and stdout, a JSON line
// each way per request.
const helperEnv = "NODEMGR_OVERLAY_HELPER"

// echoPort is where each helper answers a TCP call with the address the
// call came from.
const echoPort = 7777

type helperRequest struct {
	Op    string // apply, peers, concurrent, dial, close
	State State  // apply, concurrent
	From  string // dial: the source address
	To    string // dial: ip:port
}

type helperReply struct {
	Err       string
	PublicKey string
	Kind      string
	Peers     []PeerStatus
	Seen      string // dial: the source address the far side saw
}

// TestHelperMesh is not a test: it is the helper process of TestMesh and
// the Mesh benchmarks.
func TestHelperMesh(t *testing.T) {
	keyFile := os.Getenv(helperEnv)
	if keyFile == "" {
		t.Skip("the helper process of TestMesh")
	}
	out := json.NewEncoder(os.Stdout)
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	m, err := New(Config{KeyFile: keyFile}, log)
	if err != nil {
		out.Encode(helperReply{Err: err.Error()})
		return
	}
	defer m.Close()
	ln, err := net.Listen("tcp", fmt.Sprintf(":%d", echoPort))
	if err != nil {
		out.Encode(helperReply{Err: err.Error()})
		return
	}
	defer ln.Close()
	go echoSource(ln)
	out.Encode(helperReply{PublicKey: m.PublicKey(), Kind: m.Kind()})
	in := json.NewDecoder(os.Stdin)
	for {
		var req helperRequest
		if err := in.Decode(&req); err != nil {
			return // the test is done with us
		}
		out.Encode(serveHelper(m, req))
		if req.Op == "close" {
			return
		}
	}
}

func serveHelper(m *Mesh, req helperRequest) helperReply {
	var r helperReply
	var err error
	switch req.Op {
	case "apply":
		err = m.Apply(req.State)
	case "peers":
		r.Peers, err = m.Peers()
	case "concurrent":
		err = applyConcurrently(m, req.State)
	case "dial":
		r.Seen, err = callEcho(req.From, req.To)
	case "close":
		err = m.Close()
	default:
		err = fmt.Errorf("unknown op %q", req.Op)
	}
	if err != nil {
		r.Err = err.Error()
	}
	return r
}

// applyConcurrently calls Apply and Peers from several goroutines at once.
func applyConcurrently(m *Mesh, s State) error {
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Go(func() {
			for range 10 {
				if err := m.Apply(s); err != nil {
					errs[i] = err
					return
				}
				if _, err := m.Peers(); err != nil {
					errs[i] = err
					return
				}
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

func echoSource(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		host, _, _ := net.SplitHostPort(c.RemoteAddr().String())
		c.Write([]byte(host))
		c.Close()
	}
}

// callEcho calls the echo server at to from the address from, and returns
// what it saw the call come from.
func callEcho(from, to string) (string, error) {
	d := net.Dialer{Timeout: time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	c, err := d.Dial("tcp", to)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Second))
	b, err := io.ReadAll(c)
	return string(b), err
}

// helper is the test's end of a helper process.
type helper struct {
	t      testing.TB
	name   string
	ns     string
	in     *json.Encoder
	lines  chan string
	pub    string
	kind   string
	stderr syncbuf.Buffer
}

func startHelper(t testing.TB, name, ns string) *helper {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	h := &helper{t: t, name: name, ns: ns, lines: make(chan string, 16)}
	cmd := exec.Command("ip", "netns", "exec", ns, exe, "-test.run=^TestHelperMesh$", "-test.count=1")
	cmd.Env = append(os.Environ(), helperEnv+"="+filepath.Join(t.TempDir(), "overlay", "key"))
	cmd.Stderr = &h.stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start helper %s: %v", name, err)
	}
	exited := make(chan struct{})
	go func() {
		// Only the JSON lines are ours; the test framework writes PASS.
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "{") {
				h.lines <- sc.Text()
			}
		}
		close(h.lines)
		cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		stdin.Close()
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("helper %s's log:\n%s", name, tail(h.stderr.String(), 6000))
		}
	})
	h.in = json.NewEncoder(stdin)
	hello := h.read()
	if hello.Err != "" {
		t.Fatalf("helper %s: New: %s", name, hello.Err)
	}
	h.pub, h.kind = hello.PublicKey, hello.Kind
	return h
}

func (h *helper) read() helperReply {
	h.t.Helper()
	select {
	case line, ok := <-h.lines:
		if !ok {
			h.t.Fatalf("helper %s exited", h.name)
		}
		var r helperReply
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			h.t.Fatalf("helper %s said %q: %v", h.name, line, err)
		}
		return r
	case <-time.After(30 * time.Second):
		h.t.Fatalf("helper %s: no answer in 30s", h.name)
		return helperReply{}
	}
}

func (h *helper) call(req helperRequest) (helperReply, error) {
	h.t.Helper()
	if err := h.in.Encode(req); err != nil {
		h.t.Fatalf("helper %s: send %s: %v", h.name, req.Op, err)
	}
	r := h.read()
	if r.Err != "" {
		return r, errors.New(r.Err)
	}
	return r, nil
}

func (h *helper) apply(s State) error {
	h.t.Helper()
	_, err := h.call(helperRequest{Op: "apply", State: s})
	return err
}

func (h *helper) mustApply(s State) {
	h.t.Helper()
	if err := h.apply(s); err != nil {
		h.t.Fatalf("%s: Apply(%v) = %v, want nil", h.name, s, err)
	}
}

func (h *helper) peers() []PeerStatus {
	h.t.Helper()
	r, err := h.call(helperRequest{Op: "peers"})
	if err != nil {
		h.t.Fatalf("%s: Peers() = %v", h.name, err)
	}
	return r.Peers
}

// reach calls the echo server at to (over the mesh) from the overlay
// address from, and checks that the far side saw the call come from it.
func (h *helper) reach(from, to netip.Addr) error {
	h.t.Helper()
	r, err := h.call(helperRequest{Op: "dial", From: from.String(), To: netip.AddrPortFrom(to, echoPort).String()})
	if err != nil {
		return err
	}
	if r.Seen != from.String() {
		return fmt.Errorf("the far side saw the call come from %q, want %s", r.Seen, from)
	}
	return nil
}

// ip runs `ip -n ns args...` and returns its output.
func (h *helper) ip(args ...string) (string, error) {
	out, err := exec.Command("ip", append([]string{"-n", h.ns}, args...)...).CombinedOutput()
	return string(out), err
}

// TestMesh runs a Mesh in each of two network namespaces joined by a veth
// pair, and checks that traffic crosses the overlay, that Apply removes and
// adds back a peer, moves routes, and keeps sessions it does not change,
// and that Close removes the link.
func TestMesh(t *testing.T) {
	p := startMeshPair(t)
	a, b, underA, underB := p.a, p.b, p.underA, p.underB
	addrA, addrB, stateA, stateB := p.addrA, p.addrB, p.stateA, p.stateB
	if a.kind != "userspace" && a.kind != "kernel" {
		t.Fatalf("Kind() = %q, want userspace or kernel", a.kind)
	}
	t.Logf("device kind: %s", a.kind)

	a.mustApply(stateA)
	b.mustApply(stateB)
	wantIP(t, a, []string{"addr", "show", "dev", DefaultInterface}, "inet 100.64.1.1/32", true)
	wantIP(t, a, []string{"route", "show", "dev", DefaultInterface}, "100.64.2.0/24 proto 110 scope link", true)

	waitFor(t, "A reaches B over the mesh", 20*time.Second, func() error { return a.reach(addrA, addrB) })
	waitFor(t, "B reaches A over the mesh", 10*time.Second, func() error { return b.reach(addrB, addrA) })

	before := a.peers()
	if len(before) != 1 {
		t.Fatalf("A's Peers() = %v, want B alone", before)
	}
	if p := before[0]; p.PublicKey != b.pub || p.Endpoint != underB+":51820" || p.LastHandshake.IsZero() || p.RxBytes == 0 || p.TxBytes == 0 {
		t.Errorf("A's Peers() = %+v, want B at %s:51820 with a handshake and bytes both ways", p, underB)
	}
	if p := b.peers(); len(p) != 1 || p[0].Endpoint != underA+":51820" {
		t.Errorf("B's Peers() = %+v, want A, its endpoint learned as %s:51820", p, underA)
	}

	// Applying the same state again changes nothing: the session stays.
	a.mustApply(stateA)
	if after := a.peers(); len(after) != 1 || !after[0].LastHandshake.Equal(before[0].LastHandshake) {
		t.Errorf("after a repeated Apply, A's Peers() = %+v, want the handshake of %v kept", after, before[0].LastHandshake)
	}
	if err := a.reach(addrA, addrB); err != nil {
		t.Errorf("after a repeated Apply A cannot reach B: %v", err)
	}

	// Several goroutines at once.
	if _, err := a.call(helperRequest{Op: "concurrent", State: stateA}); err != nil {
		t.Errorf("concurrent Apply and Peers: %v", err)
	}

	// Bad input changes nothing.
	bad := stateA
	bad.Peers = append(slices.Clone(stateA.Peers), Peer{PublicKey: "nope"})
	if err := a.apply(bad); err == nil || !strings.Contains(err.Error(), "peers[1].public_key") {
		t.Errorf("Apply(%v) = %v, want a peers[1].public_key error", bad, err)
	}
	if got := a.peers(); len(got) != 1 || got[0].PublicKey != b.pub {
		t.Errorf("after a refused Apply, A's Peers() = %+v, want B alone", got)
	}

	// A narrower block for B: the route moves, the session stays.
	narrow := stateA
	narrow.Peers = []Peer{stateA.Peers[0]}
	narrow.Peers[0].AllowedIPs = pfxs("100.64.2.0/25")
	a.mustApply(narrow)
	wantIP(t, a, []string{"route", "show", "dev", DefaultInterface}, "100.64.2.0/24", false)
	wantIP(t, a, []string{"route", "show", "dev", DefaultInterface}, "100.64.2.0/25 proto 110 scope link", true)
	if err := a.reach(addrA, addrB); err != nil {
		t.Errorf("with B's block narrowed A cannot reach B: %v", err)
	}

	// B drops A: A's calls go unanswered.
	b.mustApply(State{Address: stateB.Address})
	if p := b.peers(); len(p) != 0 {
		t.Errorf("B's Peers() after dropping A = %+v, want none", p)
	}
	wantIP(t, b, []string{"route", "show", "dev", DefaultInterface}, "100.64.1.0/24", false)
	if err := a.reach(addrA, addrB); err == nil {
		t.Errorf("A still reaches B after B dropped A")
	}

	// B takes A back, now with A's endpoint and a keepalive, which makes B
	// call A at once.
	healed := stateB
	healed.Peers = []Peer{{PublicKey: a.pub, Endpoint: underA + ":51820", AllowedIPs: pfxs("100.64.1.0/24"), Keepalive: 25 * time.Second}}
	b.mustApply(healed)
	waitFor(t, "A reaches B after B took A back", 20*time.Second, func() error { return a.reach(addrA, addrB) })
	if p := b.peers(); len(p) != 1 || p[0].Keepalive != 25*time.Second || p[0].LastHandshake.IsZero() {
		t.Errorf("B's Peers() = %+v, want A with a 25s keepalive and a handshake", p)
	}

	// Close removes the link, and its routes with it.
	if _, err := a.call(helperRequest{Op: "close"}); err != nil {
		t.Errorf("Close() = %v", err)
	}
	if out, err := a.ip("link", "show", "dev", DefaultInterface); err == nil {
		t.Errorf("after Close, %s is still there:\n%s", DefaultInterface, out)
	}
}

// meshPair is two network namespaces joined by a veth pair, each with a
// helper process serving a Mesh, and the States that join the two Meshes.
type meshPair struct {
	a, b           *helper
	underA, underB string     // the veth addresses
	addrA, addrB   netip.Addr // the overlay addresses
	stateA, stateB State      // not yet applied
}

// startMeshPair makes a meshPair, skipping the test where it cannot (see
// needMeshPrivileges). All of it goes when the test ends.
func startMeshPair(t testing.TB) *meshPair {
	t.Helper()
	needMeshPrivileges(t)
	pid := os.Getpid()
	nsA, nsB := fmt.Sprintf("nodemgr-ovl%d-a", pid), fmt.Sprintf("nodemgr-ovl%d-b", pid)
	p := &meshPair{addrA: netip.MustParseAddr("100.64.1.1"), addrB: netip.MustParseAddr("100.64.2.1")}
	p.underA, p.underB = underlay(t, nsA, nsB, pid%256)
	p.a, p.b = startHelper(t, "A", nsA), startHelper(t, "B", nsB)
	p.stateA = State{Address: pfx("100.64.1.1/32"), Peers: []Peer{{PublicKey: p.b.pub, Endpoint: p.underB + ":51820", AllowedIPs: pfxs("100.64.2.0/24")}}}
	// B does not know A's endpoint: it answers once A has called.
	p.stateB = State{Address: pfx("100.64.2.1/32"), Peers: []Peer{{PublicKey: p.a.pub, AllowedIPs: pfxs("100.64.1.0/24")}}}
	return p
}

// wantIP checks whether `ip -n ns args...` prints want.
func wantIP(t *testing.T, h *helper, args []string, want string, present bool) {
	t.Helper()
	out, err := h.ip(args...)
	if err != nil {
		t.Fatalf("%s: ip %s: %v\n%s", h.name, strings.Join(args, " "), err, out)
	}
	if strings.Contains(out, want) != present {
		t.Errorf("%s: ip %s =\n%s\nwant %q present: %v", h.name, strings.Join(args, " "), out, want, present)
	}
}

// needMeshPrivileges skips the test where a real mesh cannot be made, or
// fails it there if NODEMGR_REQUIRE_OVERLAY=1 says it must run.
func needMeshPrivileges(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		unavailable(t, "needs root")
	}
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		unavailable(t, "needs /dev/net/tun")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		unavailable(t, "needs the ip command")
	}
}

func unavailable(t testing.TB, why string) {
	t.Helper()
	if os.Getenv("NODEMGR_REQUIRE_OVERLAY") == "1" {
		t.Fatalf("%s, and NODEMGR_REQUIRE_OVERLAY=1", why)
	}
	t.Skipf("%s (NODEMGR_REQUIRE_OVERLAY=1 makes this a failure)", why)
}

// underlay makes two network namespaces joined by a veth pair, addressed
// 10.213.n.1/24 and 10.213.n.2/24, and returns those addresses. The
// namespaces, and the pair with them, go when the test ends.
func underlay(t testing.TB, nsA, nsB string, n int) (string, string) {
	t.Helper()
	for _, ns := range []string{nsA, nsB} {
		exec.Command("ip", "netns", "del", ns).Run() // a leftover of a crashed run with our PID
		if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
			unavailable(t, fmt.Sprintf("cannot make network namespaces: %v: %s", err, out))
		}
		t.Cleanup(func() {
			if out, err := exec.Command("ip", "netns", "del", ns).CombinedOutput(); err != nil {
				t.Errorf("ip netns del %s: %v: %s", ns, err, out)
			}
		})
	}
	vethA, vethB := fmt.Sprintf("ovl%da", os.Getpid()), fmt.Sprintf("ovl%db", os.Getpid())
	addrA, addrB := fmt.Sprintf("10.213.%d.1", n), fmt.Sprintf("10.213.%d.2", n)
	for _, args := range [][]string{
		{"link", "add", vethA, "netns", nsA, "type", "veth", "peer", "name", vethB, "netns", nsB},
		{"-n", nsA, "addr", "add", addrA + "/24", "dev", vethA},
		{"-n", nsB, "addr", "add", addrB + "/24", "dev", vethB},
		{"-n", nsA, "link", "set", vethA, "up"},
		{"-n", nsB, "link", "set", vethB, "up"},
		{"-n", nsA, "link", "set", "lo", "up"},
		{"-n", nsB, "link", "set", "lo", "up"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	return addrA, addrB
}

// waitFor polls check until it returns nil, failing the test if it has
// not by the deadline.
func waitFor(t testing.TB, what string, timeout time.Duration, check func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still %v after %v", what, err, timeout)
		}
		time.Sleep(200 * time.Millisecond) // the poll interval
	}
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "..." + s[len(s)-n:]
}
