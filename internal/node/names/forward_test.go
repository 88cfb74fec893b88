package names

import (
	"bufio"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodemgr/nodemgr/internal/base/syncbuf"
)

// fakeUpstream is a real DNS server on 127.0.0.1, UDP and TCP, that
// answers example.com. with 192.0.2.10, big.example.com. with 100
// addresses (truncated over UDP, as a real server would), and every other
// name with NXDOMAIN. It counts queries per network.
type fakeUpstream struct {
	addr     string
	udp, tcp atomic.Int32
}

func startUpstream(t *testing.T) *fakeUpstream {
	t.Helper()
	l, err := bind("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	up := &fakeUpstream{addr: l.udp.LocalAddr().String()}
	h := dns.HandlerFunc(up.serveDNS)
	stop := make(chan struct{})
	errc := make(chan error, 2)
	for _, srv := range []*dns.Server{{PacketConn: l.udp, Handler: h}, {Listener: l.tcp, Handler: h}} {
		go func() { errc <- serve(srv, stop) }()
	}
	t.Cleanup(func() {
		close(stop)
		for range 2 {
			if err := <-errc; err != nil {
				t.Errorf("upstream: %v", err)
			}
		}
	})
	return up
}

func (up *fakeUpstream) serveDNS(w dns.ResponseWriter, req *dns.Msg) {
	_, udp := w.LocalAddr().(*net.UDPAddr)
	if udp {
		up.udp.Add(1)
	} else {
		up.tcp.Add(1)
	}
	resp := new(dns.Msg).SetReply(req)
	a := func(ip string) dns.RR {
		return &dns.A{Hdr: dns.RR_Header{Name: req.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60}, A: net.ParseIP(ip)}
	}
	switch strings.ToLower(req.Question[0].Name) {
	case "example.com.":
		resp.Answer = []dns.RR{a("192.0.2.10")}
	case "big.example.com.":
		for i := range 100 {
			resp.Answer = append(resp.Answer, a(netip.AddrFrom4([4]byte{198, 51, 100, byte(i)}).String()))
		}
	default:
		resp.Rcode = dns.RcodeNameError
	}
	if udp {
		resp.Truncate(dns.MinMsgSize)
	}
	w.WriteMsg(resp)
}

// blackhole is an upstream that reads queries and never answers.
func blackhole(t *testing.T) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 65536)
		for {
			if _, _, err := pc.ReadFrom(buf); err != nil {
				return
			}
		}
	}()
	return pc.LocalAddr().String()
}

func TestForward(t *testing.T) {
	up := startUpstream(t)
	s, addr := start(t, Config{Upstream: []string{up.addr}})
	if err := s.Set(map[string][]netip.Addr{"web.shop.nodemgr": ips("10.0.0.1")}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		network   string
		name      string
		rcode     int
		answers   int
		truncated bool
	}{
		{"udp", "example.com.", dns.RcodeSuccess, 1, false},
		{"tcp", "example.com.", dns.RcodeSuccess, 1, false},
		{"udp", "Example.COM.", dns.RcodeSuccess, 1, false},
		{"udp", "nope.example.com.", dns.RcodeNameError, 0, false},
		{"tcp", "nope.example.com.", dns.RcodeNameError, 0, false},
		// Upstream truncates over UDP; the forwarder asks again over
		// TCP, and cuts the answer itself for a UDP client.
		{"tcp", "big.example.com.", dns.RcodeSuccess, 100, false},
		{"udp", "big.example.com.", dns.RcodeSuccess, -1, true},
	} {
		t.Run(tc.network+" "+tc.name, func(t *testing.T) {
			m := new(dns.Msg).SetQuestion(tc.name, dns.TypeA)
			r := exchange(t, tc.network, addr, m)
			if r.Id != m.Id {
				t.Errorf("reply ID %d, want the query's %d", r.Id, m.Id)
			}
			n := len(r.Answer)
			if r.Rcode != tc.rcode || r.Truncated != tc.truncated || (tc.answers >= 0 && n != tc.answers) {
				t.Errorf("rcode %s, TC %v, %d answers; want %s, TC %v, %d",
					dns.RcodeToString[r.Rcode], r.Truncated, n, dns.RcodeToString[tc.rcode], tc.truncated, tc.answers)
			}
			if r.Authoritative {
				t.Errorf("forwarded answer has AA, want the upstream's flags")
			}
			if tc.rcode == dns.RcodeSuccess && n > 0 && r.Answer[0].Header().Name != tc.name {
				t.Errorf("answer name %s, want %s", r.Answer[0].Header().Name, tc.name)
			}
		})
	}
	if up.tcp.Load() == 0 {
		t.Errorf("upstream got no TCP query: truncated answers were not asked again over TCP")
	}
	// The zone is never forwarded.
	udp, tcp := up.udp.Load(), up.tcp.Load()
	ask(t, "udp", addr, "web.shop.nodemgr.", dns.TypeA)
	ask(t, "udp", addr, "gone.shop.nodemgr.", dns.TypeA)
	if up.udp.Load() != udp || up.tcp.Load() != tcp {
		t.Errorf("names in %s were forwarded", Zone)
	}
}

func TestForwardUnanswered(t *testing.T) {
	const timeout = 300 * time.Millisecond
	up := startUpstream(t)
	hole := blackhole(t)
	for _, tc := range []struct {
		name      string
		upstreams []string
		rcode     int
		min, max  time.Duration
	}{
		{"none answers", []string{hole, hole}, dns.RcodeServerFailure, 2 * timeout, 4 * timeout},
		{"the next answers", []string{hole, up.addr}, dns.RcodeSuccess, timeout, 3 * timeout},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newServer(t, Config{Upstream: tc.upstreams}, slog.New(slog.DiscardHandler))
			s.fwd.timeout = timeout // before Run: the handlers read it
			run(t, s)
			begin := time.Now()
			r := ask(t, "udp", s.Addrs()[0].String(), "example.com.", dns.TypeA)
			took := time.Since(begin)
			if r.Rcode != tc.rcode {
				t.Errorf("rcode = %s, want %s", dns.RcodeToString[r.Rcode], dns.RcodeToString[tc.rcode])
			}
			if took < tc.min || took > tc.max {
				t.Errorf("answered in %v, want between %v and %v (%v per upstream)", took, tc.min, tc.max, timeout)
			}
		})
	}
}

func TestNoUpstream(t *testing.T) {
	var logs syncbuf.Buffer
	s := newServer(t, Config{ResolvConf: filepath.Join(t.TempDir(), "missing")}, slog.New(slog.NewTextHandler(&logs, nil)))
	run(t, s)
	addr := s.Addrs()[0].String()
	for range 2 {
		if r := ask(t, "udp", addr, "example.com.", dns.TypeA); r.Rcode != dns.RcodeRefused {
			t.Errorf("A example.com. = %s, want REFUSED", dns.RcodeToString[r.Rcode])
		}
	}
	if r := ask(t, "udp", addr, "x.nodemgr.", dns.TypeA); r.Rcode != dns.RcodeNameError {
		t.Errorf("A x.nodemgr. = %s, want NXDOMAIN: the zone is served without upstreams", dns.RcodeToString[r.Rcode])
	}
	if n := strings.Count(logs.String(), "no upstream"); n != 1 {
		t.Errorf("logged %d times that there is no upstream, want once:\n%s", n, logs.String())
	}
}

func TestResolvConf(t *testing.T) {
	conf := `# written by a test
; another comment
search example.com
nameserver 127.0.0.1
nameserver   127.0.0.53 # systemd-resolved, reachable from the host's namespace
nameserver ::1
nameserver fe80::1%eth0
nameserver not-an-address
# nameserver 192.0.2.99
options edns0
`
	path := filepath.Join(t.TempDir(), "resolv.conf")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	want := []string{"127.0.0.1:53", "127.0.0.53:53", "[::1]:53", "[fe80::1%eth0]:53"}
	if got := parseResolvConf(bufio.NewScanner(strings.NewReader(conf))); !slices.Equal(got, want) {
		t.Errorf("parseResolvConf = %v, want %v", got, want)
	}

	empty := filepath.Join(t.TempDir(), "empty.conf")
	if err := os.WriteFile(empty, []byte("search example.com\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		cfg  Config
		want []string // nil: no forwarder
	}{
		{"resolv.conf", Config{ResolvConf: path}, want},
		{"upstream wins", Config{ResolvConf: path, Upstream: []string{"192.0.2.1:5353"}}, []string{"192.0.2.1:5353"}},
		{"no nameserver", Config{ResolvConf: empty}, nil},
		{"missing", Config{ResolvConf: filepath.Join(t.TempDir(), "missing")}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newServer(t, tc.cfg, slog.New(slog.DiscardHandler))
			defer s.Close()
			var got []string
			if s.fwd != nil {
				got = s.fwd.upstreams
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("upstreams = %v, want %v", got, tc.want)
			}
		})
	}
}
