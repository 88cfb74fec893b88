package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"
	"golang.org/x/sys/unix"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/syncbuf"
	"github.com/nodemgr/nodemgr/internal/drivers/provision/docker/dockertest"
)

// The overlay between nodes (issue 32), on this machine: each node is a
// network namespace with one veth on a shared "underlay" bridge (in a
// namespace of its own), its agent inside. The nodes' underlay addresses
// reach each other; their overlay addresses are routed only by nodemgr.
// The server listens on 127.0.0.1 here, and each node reaches it through
// a forwarder the test runs inside the node's namespace.

// requireOverlay skips without root, ip or TUN, unless
// NODEMGR_REQUIRE_OVERLAY=1 makes that a failure.
func requireOverlay(t *testing.T) {
	t.Helper()
	why := ""
	switch {
	case os.Geteuid() != 0:
		why = "needs root to make network namespaces"
	case !haveCommand("ip") || !haveCommand("tcpdump"):
		why = "needs ip and tcpdump (apt-get install iproute2 tcpdump)"
	default:
		if _, err := os.Stat("/dev/net/tun"); err != nil {
			why = "needs /dev/net/tun"
		}
	}
	if why == "" {
		return
	}
	if os.Getenv("NODEMGR_REQUIRE_OVERLAY") == "1" {
		t.Fatalf("the overlay test is required (NODEMGR_REQUIRE_OVERLAY=1) but it %s", why)
	}
	t.Skipf("the overlay test %s", why)
}

func haveCommand(name string) bool {
	_, err := exec.LookPath(name)
	return err == nil
}

// underlay is the namespaces of one test.
type underlay struct {
	t      *testing.T
	prefix string
	bridge string // the namespace holding the bridge
	nodes  []string
}

func ipCmd(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// newUnderlay makes a bridge namespace and n node namespaces on it, node
// i at 10.214.0.(i+2)/24.
func newUnderlay(t *testing.T, n int) *underlay {
	u := &underlay{t: t, prefix: fmt.Sprintf("nm%d", os.Getpid()%100000)}
	u.bridge = u.prefix + "-ul"
	ipCmd(t, "netns", "add", u.bridge)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", u.bridge).Run() })
	ipCmd(t, "-n", u.bridge, "link", "add", "br0", "type", "bridge")
	ipCmd(t, "-n", u.bridge, "link", "set", "br0", "up")
	for i := range n {
		ns := fmt.Sprintf("%s-n%d", u.prefix, i)
		ipCmd(t, "netns", "add", ns)
		t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
		host, peer := fmt.Sprintf("%sh%d", u.prefix, i), fmt.Sprintf("%sp%d", u.prefix, i)
		ipCmd(t, "link", "add", host, "type", "veth", "peer", "name", peer)
		ipCmd(t, "link", "set", host, "netns", u.bridge)
		ipCmd(t, "link", "set", peer, "netns", ns)
		ipCmd(t, "-n", u.bridge, "link", "set", host, "master", "br0", "up")
		ipCmd(t, "-n", ns, "link", "set", peer, "name", "eth0")
		ipCmd(t, "-n", ns, "addr", "add", u.addr(i)+"/24", "dev", "eth0")
		ipCmd(t, "-n", ns, "link", "set", "eth0", "up")
		ipCmd(t, "-n", ns, "link", "set", "lo", "up")
		u.nodes = append(u.nodes, ns)
	}
	return u
}

func (u *underlay) addr(i int) string { return fmt.Sprintf("10.214.0.%d", i+2) }

// inNetns runs fn on a thread inside namespace ns: sockets it makes
// stay in ns after.
func inNetns(ns string, fn func() error) error {
	runtime.LockOSThread()
	self, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer self.Close()
	target, err := os.Open(filepath.Join("/var/run/netns", ns))
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer target.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("enter %s: %w", ns, err)
	}
	ferr := fn()
	if err := unix.Setns(int(self.Fd()), unix.CLONE_NEWNET); err != nil {
		return fmt.Errorf("leave %s: %w", ns, err) // the thread stays locked and dies with the goroutine
	}
	runtime.UnlockOSThread()
	return ferr
}

// forward listens on 127.0.0.1:7070 inside ns and carries each
// connection to to (in the test's namespace): how a node's agent reaches
// the server.
func forward(t *testing.T, ns, to string) {
	var ln net.Listener
	if err := inNetns(ns, func() (err error) { ln, err = net.Listen("tcp", "127.0.0.1:7070"); return err }); err != nil {
		t.Fatal(err)
	}
	proxy(t, ln, to)
}

// dialIn dials addr from inside ns.
func dialIn(ns, addr string, timeout time.Duration) (net.Conn, error) {
	var c net.Conn
	err := inNetns(ns, func() (err error) {
		d := net.Dialer{Timeout: timeout}
		c, err = d.Dial("tcp", addr)
		return err
	})
	return c, err
}

// echoIn serves a line echo on addr inside ns.
func echoIn(t *testing.T, ns, addr string) {
	var ln net.Listener
	if err := inNetns(ns, func() (err error) { ln, err = net.Listen("tcp", addr); return err }); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				line, _ := bufio.NewReader(c).ReadString('\n')
				io.WriteString(c, "echo "+line)
			}()
		}
	}()
}

// echoes says whether a line sent from ns to addr comes back.
func echoes(ns, addr string) error {
	c, err := dialIn(ns, addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	io.WriteString(c, "hello\n")
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if line != "echo hello\n" {
		return fmt.Errorf("answer %q", line)
	}
	return nil
}

// startAgentIn starts an agent inside ns, in the groups of its join token.
func startAgentIn(t *testing.T, s *server, ns, name, endpoint string, groups ...string) *agent {
	t.Helper()
	return startAgentInWith(t, s, ns, name, endpoint, groups)
}

// startAgentInWith is startAgentIn with more flags.
func startAgentInWith(t *testing.T, s *server, ns, name, endpoint string, groups []string, extra ...string) *agent {
	t.Helper()
	a := &agent{dataDir: passable(t, t.TempDir())}
	a.args = append([]string{"agent", "--server", "http://127.0.0.1:7070", "--data-dir", a.dataDir, "--name", name,
		"--join-token", s.joinToken(t, groups...), "--reconnect-min", "100ms", "--reconnect-max", "500ms",
		"--overlay", "--overlay-endpoint", endpoint + ":51820"}, extra...)
	cmd := exec.Command("ip", append([]string{"netns", "exec", ns, binary}, a.args...)...)
	cmd.Env = append(os.Environ(), "NODEMGR_TOKEN=", "NODEMGR_ADDR=", "GORACE=atexit_sleep_ms=0")
	a.proc = startCmd(t, "agent "+name, cmd)
	return a
}

// overlayNodes is the server's overlay list by node name.
func overlayNodes(t *testing.T, s *server) map[string]api.OverlayNode {
	list, err := s.client().Network(context.Background())
	if err != nil {
		return nil
	}
	out := map[string]api.OverlayNode{}
	for _, n := range list.Nodes {
		out[n.Node] = n
	}
	return out
}

// waitDevices waits until each node's device has its address and a link
// to each of its peers.
func waitDevices(t *testing.T, s *server, nodes map[string]api.OverlayNode) {
	t.Helper()
	for name, n := range nodes {
		waitFor(t, 30*time.Second, name+"'s device on its state", func() (bool, string) {
			d, err := s.client().Overlay(context.Background(), name)
			return err == nil && d.State != nil && d.State.Address == n.Address && len(d.Links) == len(n.Peers), fmt.Sprint(d, err)
		})
	}
}

func TestOverlayBetweenNodes(t *testing.T) {
	requireOverlay(t)
	u := newUnderlay(t, 3)
	s := startServer(t)
	for _, ns := range u.nodes {
		forward(t, ns, s.addr)
	}
	// a and b share the group shop; c is in another group.
	startAgentIn(t, s, u.nodes[0], "ov-a", u.addr(0), "shop")
	startAgentIn(t, s, u.nodes[1], "ov-b", u.addr(1), "shop")
	startAgentIn(t, s, u.nodes[2], "ov-c", u.addr(2), "other")
	var nodes map[string]api.OverlayNode
	waitFor(t, 30*time.Second, "three nodes on the overlay", func() (bool, string) {
		nodes = overlayNodes(t, s)
		return len(nodes) == 3, fmt.Sprint(nodes)
	})
	a, b, c := nodes["ov-a"], nodes["ov-b"], nodes["ov-c"]
	waitDevices(t, s, nodes)
	if !slices.Equal(a.Peers, []string{"ov-b"}) || !slices.Equal(c.Peers, []string{}) {
		t.Errorf("peers: a %v, c %v; want a with b alone and c with none", a.Peers, c.Peers)
	}
	if a.Endpoint != u.addr(0)+":51820" || a.Kind != api.OverlayUserspace {
		t.Errorf("a's endpoint %s (%s), want %s:51820, userspace", a.Endpoint, a.Kind, u.addr(0))
	}
	bAddr := strings.TrimSuffix(b.Address, "/32")
	echoIn(t, u.nodes[1], net.JoinHostPort(bAddr, "9000"))
	echoIn(t, u.nodes[2], net.JoinHostPort(strings.TrimSuffix(c.Address, "/32"), "9000"))

	// Capture a's underlay while a talks to b over the overlay.
	capture := filepath.Join(t.TempDir(), "underlay.pcap")
	dump := exec.Command("ip", "netns", "exec", u.nodes[0], "tcpdump", "-i", "eth0", "-n", "-U", "-w", capture)
	var dumpErr syncbuf.Buffer // written by the copy from tcpdump's stderr, read here
	dump.Stderr = &dumpErr
	if err := dump.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "tcpdump listening", func() (bool, string) {
		return strings.Contains(dumpErr.String(), "listening"), dumpErr.String()
	})
	waitFor(t, 30*time.Second, "a reaching b on the overlay", func() (bool, string) {
		err := echoes(u.nodes[0], net.JoinHostPort(bAddr, "9000"))
		return err == nil, fmt.Sprint(err)
	})
	for range 20 {
		if err := echoes(u.nodes[0], net.JoinHostPort(bAddr, "9000")); err != nil {
			t.Fatalf("a → b on the overlay, once it worked: %v", err)
		}
	}
	// tcpdump writes what it read so far (-U): wait for the exchanges to
	// reach the file before stopping it.
	sealed := 0
	waitFor(t, 20*time.Second, "the exchanges in the capture", func() (bool, string) {
		sealed = tcpdumpCount(t, capture, "udp port 51820")
		return sealed >= 100, fmt.Sprintf("%d WireGuard packets", sealed)
	})
	dump.Process.Signal(os.Interrupt)
	dump.Wait()
	clear := tcpdumpCount(t, capture, "tcp port 9000")
	if clear != 0 || sealed == 0 {
		t.Errorf("the underlay carried %d packets of the workload's TCP in clear and %d of WireGuard (%d in all); want 0 and some\n%s",
			clear, sealed, tcpdumpCount(t, capture, ""), dumpErr.String())
	}

	// c shares no group with a: no route, and a would not take its packets.
	if err := echoes(u.nodes[2], net.JoinHostPort(bAddr, "9000")); err == nil {
		t.Error("c, in another group, reached b on the overlay")
	}

	// The show command sees the link with a handshake and bytes.
	out, stderr, code := s.run(t, "network", "show", "ov-a", "--json")
	if code != 0 {
		t.Fatalf("network show: exit %d: %s", code, stderr)
	}
	if !strings.Contains(out, `"last_handshake"`) || !strings.Contains(out, `"node": "ov-b"`) {
		t.Errorf("network show ov-a = %s; want the link to ov-b with a handshake", out)
	}

	// The per-peer metrics: what a sent b, as a's heartbeats say.
	series := fmt.Sprintf(`nodemgr_overlay_peer_sent_bytes_total{node_id=%q,peer_id=%q} `, a.NodeID, b.NodeID)
	waitFor(t, 10*time.Second, "a's bytes to b in the metrics", func() (bool, string) {
		_, text, _ := scrape(t, s)
		i := strings.Index(text, series)
		if i < 0 {
			return false, "no " + series
		}
		value, _, _ := strings.Cut(text[i+len(series):], "\n")
		return value != "0", series + value
	})

	// Cutting b's device breaks the path; the agent brings its routes back
	// once the link is up again.
	ipCmd(t, "-n", u.nodes[1], "link", "set", "nodemgr0", "down")
	if err := echoes(u.nodes[0], net.JoinHostPort(bAddr, "9000")); err == nil {
		t.Error("a reached b with b's overlay device down")
	}
	ipCmd(t, "-n", u.nodes[1], "link", "set", "nodemgr0", "up")
	waitFor(t, 30*time.Second, "a reaching b again once b's device is up", func() (bool, string) {
		err := echoes(u.nodes[0], net.JoinHostPort(bAddr, "9000"))
		return err == nil, fmt.Sprint(err)
	})
}

// tcpdumpCount counts the packets of a capture that match filter.
func tcpdumpCount(t *testing.T, file, filter string) int {
	t.Helper()
	out, err := exec.Command("tcpdump", "-r", file, "-n", filter).Output()
	if len(out) == 0 && err != nil && strings.Contains(err.Error(), "exit status") {
		return 0 // a file tcpdump has not written a header to yet
	}
	if err != nil {
		t.Fatalf("tcpdump -r %s %s: %v", file, filter, err)
	}
	n := 0
	for _, line := range strings.Split(string(out), "\n") {
		if strings.TrimSpace(line) != "" {
			n++
		}
	}
	return n
}

// resolveIn asks the DNS server at server, from inside ns, for name's
// IPv4 addresses.
func resolveIn(ns, server, name string) ([]string, error) {
	var c net.Conn
	if err := inNetns(ns, func() (err error) { c, err = net.Dial("udp", server); return err }); err != nil {
		return nil, err
	}
	conn := &dns.Conn{Conn: c}
	defer conn.Close()
	q := new(dns.Msg)
	q.SetQuestion(dns.Fqdn(name), dns.TypeA)
	c.SetDeadline(time.Now().Add(2 * time.Second))
	if err := conn.WriteMsg(q); err != nil {
		return nil, err
	}
	r, err := conn.ReadMsg()
	if err != nil {
		return nil, err
	}
	if r.Rcode != dns.RcodeSuccess {
		return nil, fmt.Errorf("%s: %s", name, dns.RcodeToString[r.Rcode])
	}
	var out []string
	for _, rr := range r.Answer {
		if a, ok := rr.(*dns.A); ok {
			out = append(out, a.A.String())
		}
	}
	return out, nil
}

// TestOverlayNamesFollowARestore: an ensemble replica's name, asked of
// another node's DNS server, leads to the node it runs on, and after its
// node is lost and the replica restored elsewhere, to the new node.
func TestOverlayNamesFollowARestore(t *testing.T) {
	requireOverlay(t)
	eng := dockertest.Client(t)
	image := dockertest.EnsureImage(t, eng)
	labelJSON, _ := json.Marshal(dockertest.Labels(t, eng))
	u := newUnderlay(t, 3)
	s := startServer(t, "--ensemble-restore-deadline", "2s")
	for _, ns := range u.nodes {
		forward(t, ns, s.addr)
	}
	agents := map[string]*agent{}
	for i, name := range []string{"nm-client", "nm-b", "nm-c"} {
		agents[name] = startAgentIn(t, s, u.nodes[i], name, u.addr(i), "shop")
	}
	var nodes map[string]api.OverlayNode
	waitFor(t, 30*time.Second, "three nodes on the overlay", func() (bool, string) {
		nodes = overlayNodes(t, s)
		return len(nodes) == 3, fmt.Sprint(nodes)
	})
	waitDevices(t, s, nodes)
	addr := func(name string) string { return strings.TrimSuffix(nodes[name].Address, "/32") }
	dnsAt := net.JoinHostPort(addr("nm-client"), "53")

	f := filepath.Join(t.TempDir(), "shop.yaml")
	os.WriteFile(f, []byte(fmt.Sprintf(`name: shop
allocations:
  - name: db
    resources: {cpus: 0.1, memory_mb: 16}
    placement: {nodes: [nm-b, nm-c]}
    container: {image: %s, command: [sleep, "300"], labels: %s, ports: [{container: 5432}]}
  - name: web
    resources: {cpus: 0.1, memory_mb: 16}
    placement: {nodes: [nm-client]}
    container: {image: %s, command: [sleep, "300"], labels: %s}
`, image, labelJSON, image, labelJSON)), 0o644)
	out, stderr, code := s.run(t, "ensemble", "deploy", "-f", f, "--json")
	var en api.Ensemble
	if code != 0 || json.Unmarshal([]byte(out), &en) != nil || len(en.Replicas) != 2 {
		t.Fatalf("deploy: exit %d\n%s%s", code, out, stderr)
	}
	first := en.Replicas[0].NodeName
	// web, on a node meshed with db's, is told db's name, not a host.
	web, err := s.client().Container(context.Background(), en.Replicas[1].Container)
	want := fmt.Sprintf("1.db.shop.nodemgr:%d", en.Replicas[0].Ports[0].Host)
	if err != nil || web.Job.Env["NODEMGR_ALLOC_DB_ADDR"] != want || web.Job.Env["NODEMGR_ALLOC_DB_NAME"] != "db.shop.nodemgr" {
		t.Errorf("web's env = %v, %v; want NODEMGR_ALLOC_DB_ADDR=%s and _NAME=db.shop.nodemgr", web.Job.Env, err, want)
	}
	waitFor(t, 15*time.Second, "1.db.shop.nodemgr at "+first, func() (bool, string) {
		got, err := resolveIn(u.nodes[0], dnsAt, "1.db.shop.nodemgr")
		return err == nil && slices.Equal(got, []string{addr(first)}), fmt.Sprint(got, err)
	})
	if got, err := resolveIn(u.nodes[0], dnsAt, "db.shop.nodemgr"); err != nil || !slices.Equal(got, []string{addr(first)}) {
		t.Errorf("db.shop.nodemgr = %v, %v; want %s", got, err, addr(first))
	}
	if _, err := resolveIn(u.nodes[0], dnsAt, "2.db.shop.nodemgr"); err == nil || !strings.Contains(err.Error(), "NXDOMAIN") {
		t.Errorf("2.db.shop.nodemgr: %v, want NXDOMAIN", err)
	}

	// The replica's node is lost: after the restore deadline the replica
	// runs on the other node, and the same name leads there.
	agents[first].signal(syscall.SIGKILL)
	var restored api.EnsembleReplica
	waitFor(t, 60*time.Second, "the replica restored on the other node", func() (bool, string) {
		e, err := s.client().Ensemble(context.Background(), "shop")
		if err != nil || len(e.Replicas) != 2 {
			return false, fmt.Sprint(e, err)
		}
		restored = e.Replicas[0]
		return restored.NodeName != first && restored.Status == api.ContainerRunning, fmt.Sprintf("%+v", restored)
	})
	at := time.Now()
	waitFor(t, 5*time.Second, "1.db.shop.nodemgr at the restored node", func() (bool, string) {
		got, err := resolveIn(u.nodes[0], dnsAt, "1.db.shop.nodemgr")
		return err == nil && slices.Equal(got, []string{addr(restored.NodeName)}), fmt.Sprint(got, err)
	})
	t.Logf("the name led to the restored replica's node %s after the restore", time.Since(at).Round(time.Millisecond))
	// The lost node's container still runs in the one engine of this
	// machine and holds the old host port, so the restore took a free one.
	if len(restored.Ports) != 1 || restored.Ports[0].Host == 0 {
		t.Errorf("the restored replica's ports = %+v, want one host port", restored.Ports)
	}
	if _, stderr, code := s.run(t, "ensemble", "shutdown", "shop"); code != 0 {
		t.Fatalf("shutdown: %s", stderr)
	}
}

// TestOverlayRelaysWhenUDPIsBlocked: two nodes whose UDP to each other is
// dropped still reach each other's overlay addresses, through the server.
func TestOverlayRelaysWhenUDPIsBlocked(t *testing.T) {
	requireOverlay(t)
	u := newUnderlay(t, 2)
	// b drops every UDP packet from and to a's underlay address.
	for _, rule := range [][]string{{"INPUT", "-s"}, {"OUTPUT", "-d"}} {
		if out, err := exec.Command("ip", "netns", "exec", u.nodes[1], "iptables", "-A", rule[0], rule[1], u.addr(0), "-p", "udp", "-j", "DROP").CombinedOutput(); err != nil {
			t.Fatalf("iptables in %s: %v\n%s", u.nodes[1], err, out)
		}
	}
	s := startServer(t)
	for _, ns := range u.nodes {
		forward(t, ns, s.addr)
	}
	startAgentInWith(t, s, u.nodes[0], "rl-a", u.addr(0), []string{"shop"}, "--overlay-relay-after", "2s")
	startAgentInWith(t, s, u.nodes[1], "rl-b", u.addr(1), []string{"shop"}, "--overlay-relay-after", "2s")
	var nodes map[string]api.OverlayNode
	waitFor(t, 30*time.Second, "two nodes on the overlay", func() (bool, string) {
		nodes = overlayNodes(t, s)
		return len(nodes) == 2, fmt.Sprint(nodes)
	})
	waitDevices(t, s, nodes)
	bAddr := strings.TrimSuffix(nodes["rl-b"].Address, "/32")
	echoIn(t, u.nodes[1], net.JoinHostPort(bAddr, "9000"))
	waitFor(t, 60*time.Second, "a reaching b through the relay", func() (bool, string) {
		err := echoes(u.nodes[0], net.JoinHostPort(bAddr, "9000"))
		return err == nil, fmt.Sprint(err)
	})
	for range 20 {
		if err := echoes(u.nodes[0], net.JoinHostPort(bAddr, "9000")); err != nil {
			t.Fatalf("a → b through the relay, once it worked: %v", err)
		}
	}
	d, err := s.client().Overlay(context.Background(), "rl-a")
	if err != nil || len(d.Links) != 1 || !strings.HasSuffix(d.Links[0].Endpoint, ":1") || d.Links[0].LastHandshake == nil {
		t.Errorf("a's device = %+v, %v; want b at its relay endpoint (its overlay address, port 1), with a handshake", d, err)
	}
	out, _, _ := s.run(t, "network", "show", "rl-a")
	t.Logf("network show rl-a:\n%s", out)
}
