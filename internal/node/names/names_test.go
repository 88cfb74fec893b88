package names

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
)

func ip(s string) netip.Addr { return netip.MustParseAddr(s) }

func ips(ss ...string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, ip(s))
	}
	return out
}

// answers returns the addresses of r's A and AAAA records, in order.
func answers(r *dns.Msg) []string {
	var out []string
	for _, rr := range r.Answer {
		switch rr := rr.(type) {
		case *dns.A:
			out = append(out, rr.A.String())
		case *dns.AAAA:
			out = append(out, rr.AAAA.String())
		}
	}
	return out
}

func sorted(ss []string) []string { return slices.Sorted(slices.Values(ss)) }

func TestSet(t *testing.T) {
	s, _ := start(t, Config{})
	good := map[string][]netip.Addr{
		"WEB.shop.nodemgr":    ips("10.0.0.1", "fd00::1", "::ffff:10.0.0.2", "10.0.0.1"),
		"1.web.shop.nodemgr.": ips("10.0.0.1"),
		"none.shop.nodemgr":   nil,
	}
	if err := s.Set(good); err != nil {
		t.Fatalf("Set(good) = %v", err)
	}
	// Lowercased, with or without the dot; IPv4 first, a mapped address
	// unmapped, duplicates dropped.
	want := map[string][]netip.Addr{
		"web.shop.nodemgr.":  ips("10.0.0.1", "10.0.0.2", "fd00::1"),
		"Web.Shop.Nodemgr":   ips("10.0.0.1", "10.0.0.2", "fd00::1"),
		"1.web.shop.nodemgr": ips("10.0.0.1"),
		"none.shop.nodemgr":  nil,
		"shop.nodemgr":       nil,
		"example.com":        nil,
	}
	for name, w := range want {
		if got := s.Lookup(name); !slices.Equal(got, w) {
			t.Errorf("Lookup(%q) = %v, want %v", name, got, w)
		}
	}

	long := strings.Repeat("a", 63)
	for _, tc := range []struct {
		name  string
		addrs []netip.Addr
		want  string // in the error
	}{
		{"web.shop.example.com", nil, `"web.shop.example.com": not under nodemgr.`},
		{"nodemgr", nil, `"nodemgr": not under`},
		{"", nil, `"": not under`},
		{"web..shop.nodemgr", nil, `label ""`},
		{".web.nodemgr", nil, `label ""`},
		{"web shop.nodemgr", nil, `label "web shop"`},
		{"wéb.nodemgr", nil, `label "wéb"`},
		{long + "a.nodemgr", nil, "label"},
		{strings.Repeat(long+".", 3) + strings.Repeat("a", 54) + ".nodemgr", nil, "longer than 253"},
		{"zero.nodemgr", []netip.Addr{{}}, `"zero.nodemgr": address "invalid IP"`},
		{"zoned.nodemgr", ips("fe80::1%eth0"), `"zoned.nodemgr": address "fe80::1%eth0"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := map[string][]netip.Addr{"ok.shop.nodemgr": ips("10.9.9.9"), tc.name: tc.addrs}
			err := s.Set(bad)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Set(%q: %v) = %v, want an error with %s", tc.name, tc.addrs, err, tc.want)
			}
			if got := s.Lookup("ok.shop.nodemgr"); got != nil {
				t.Errorf("after a bad Set, Lookup(%q) = %v, want nil: the table changed", "ok.shop.nodemgr", got)
			}
			if got, w := s.Lookup("web.shop.nodemgr"), want["web.shop.nodemgr."]; !slices.Equal(got, w) {
				t.Errorf("after a bad Set, Lookup(%q) = %v, want %v", "web.shop.nodemgr", got, w)
			}
		})
	}
	// The longest name that fits: 254 characters with the dot, 255 bytes
	// on the wire.
	longest := strings.Repeat(long+".", 3) + strings.Repeat("a", 53) + ".nodemgr."
	if err := s.Set(map[string][]netip.Addr{longest: ips("10.0.0.1")}); err != nil {
		t.Errorf("Set(%d-character name) = %v, want nil", len(longest), err)
	}
	if err := s.Set(map[string][]netip.Addr{"a.nodemgr": nil, "A.nodemgr.": nil}); err == nil {
		t.Errorf("Set(a.nodemgr and A.nodemgr.) = nil, want an error: the same name twice")
	}
}

func TestAnswer(t *testing.T) {
	s, addr := start(t, Config{TTL: 7 * time.Second})
	err := s.Set(map[string][]netip.Addr{
		"web.shop.nodemgr":   ips("10.0.0.1", "10.0.0.2", "10.0.0.3", "fd00::1", "fd00::2"),
		"1.web.shop.nodemgr": ips("10.0.0.2"),
		"v6.shop.nodemgr":    ips("fd00::9"),
		"empty.shop.nodemgr": nil,
	})
	if err != nil {
		t.Fatal(err)
	}
	const (
		noerror  = dns.RcodeSuccess
		nxdomain = dns.RcodeNameError
	)
	for _, tc := range []struct {
		name  string
		qtype uint16
		rcode int
		want  []string // sorted
	}{
		{"web.shop.nodemgr.", dns.TypeA, noerror, []string{"10.0.0.1", "10.0.0.2", "10.0.0.3"}},
		{"web.shop.nodemgr.", dns.TypeAAAA, noerror, []string{"fd00::1", "fd00::2"}},
		{"WEB.Shop.NodeMgr.", dns.TypeA, noerror, []string{"10.0.0.1", "10.0.0.2", "10.0.0.3"}},
		{"1.web.shop.nodemgr.", dns.TypeA, noerror, []string{"10.0.0.2"}},
		{"v6.shop.nodemgr.", dns.TypeAAAA, noerror, []string{"fd00::9"}},
		// NODATA: the name exists, without records of the type.
		{"1.web.shop.nodemgr.", dns.TypeAAAA, noerror, nil},
		{"v6.shop.nodemgr.", dns.TypeA, noerror, nil},
		{"web.shop.nodemgr.", dns.TypeMX, noerror, nil},
		{"empty.shop.nodemgr.", dns.TypeA, noerror, nil},
		{"shop.nodemgr.", dns.TypeA, noerror, nil}, // an ancestor of names exists too
		{"nodemgr.", dns.TypeA, noerror, nil},
		// NXDOMAIN.
		{"2.web.shop.nodemgr.", dns.TypeA, nxdomain, nil},
		{"other.nodemgr.", dns.TypeAAAA, nxdomain, nil},
		{"x.1.web.shop.nodemgr.", dns.TypeA, nxdomain, nil},
	} {
		for _, network := range []string{"udp", "tcp"} {
			t.Run(fmt.Sprintf("%s %s %s", network, dns.TypeToString[tc.qtype], tc.name), func(t *testing.T) {
				r := ask(t, network, addr, tc.name, tc.qtype)
				if r.Rcode != tc.rcode || !r.Authoritative {
					t.Errorf("rcode %s, AA %v; want %s, AA", dns.RcodeToString[r.Rcode], r.Authoritative, dns.RcodeToString[tc.rcode])
				}
				if got := sorted(answers(r)); !slices.Equal(got, tc.want) {
					t.Errorf("answers = %v, want %v", got, tc.want)
				}
				for _, rr := range r.Answer {
					if rr.Header().Ttl != 7 || rr.Header().Name != tc.name {
						t.Errorf("answer %v: want TTL 7 and name %s as asked", rr, tc.name)
					}
				}
				if len(tc.want) == 0 {
					checkSOA(t, r, 7)
				}
			})
		}
	}

	r := ask(t, "udp", addr, "nodemgr.", dns.TypeSOA)
	if len(r.Answer) != 1 || r.Answer[0].Header().Rrtype != dns.TypeSOA {
		t.Errorf("SOA nodemgr. = %v, want the SOA", r.Answer)
	}
}

// checkSOA checks that a negative answer carries the zone's SOA, whose
// minimum bounds how long it is cached (RFC 2308).
func checkSOA(t *testing.T, r *dns.Msg, ttl uint32) {
	t.Helper()
	if len(r.Ns) != 1 {
		t.Fatalf("authority = %v, want the SOA", r.Ns)
	}
	soa, ok := r.Ns[0].(*dns.SOA)
	if !ok || soa.Hdr.Name != Zone || soa.Minttl != ttl || soa.Hdr.Ttl != ttl {
		t.Errorf("authority = %v, want SOA of %s with TTL and minimum %d", r.Ns[0], Zone, ttl)
	}
}

// TestRoundRobin checks that every query gets all the addresses, starting
// at a different one each time.
func TestRoundRobin(t *testing.T) {
	s, addr := start(t, Config{})
	all := []string{"10.0.0.1", "10.0.0.2", "10.0.0.3"}
	err := s.Set(map[string][]netip.Addr{
		"web.shop.nodemgr": ips(all...),
		"db.shop.nodemgr":  ips("10.0.1.1", "10.0.1.2"),
	})
	if err != nil {
		t.Fatal(err)
	}
	firsts := map[string]bool{}
	for i := range len(all) {
		// Queries for another name in between do not skew the rotation.
		ask(t, "udp", addr, "db.shop.nodemgr.", dns.TypeA)
		got := answers(ask(t, "udp", addr, "web.shop.nodemgr.", dns.TypeA))
		if !slices.Equal(sorted(got), all) {
			t.Fatalf("query %d: answers = %v, want all of %v", i, got, all)
		}
		firsts[got[0]] = true
	}
	if len(firsts) != len(all) {
		t.Errorf("first answers over %d queries = %v, want each address once", len(all), firsts)
	}
}

// TestSetReplaces checks that a new table is answered at once, whole.
func TestSetReplaces(t *testing.T) {
	s, addr := start(t, Config{})
	set := func(m map[string][]netip.Addr) {
		t.Helper()
		if err := s.Set(m); err != nil {
			t.Fatal(err)
		}
	}
	set(map[string][]netip.Addr{"web.shop.nodemgr": ips("10.0.0.1"), "db.shop.nodemgr": ips("10.0.0.5")})
	set(map[string][]netip.Addr{"web.shop.nodemgr": ips("10.0.0.9")})

	r := ask(t, "udp", addr, "web.shop.nodemgr.", dns.TypeA)
	if got := answers(r); !slices.Equal(got, []string{"10.0.0.9"}) {
		t.Errorf("A web.shop.nodemgr. = %v, want [10.0.0.9]", got)
	}
	r = ask(t, "udp", addr, "db.shop.nodemgr.", dns.TypeA)
	if r.Rcode != dns.RcodeNameError {
		t.Errorf("A db.shop.nodemgr. (removed) = %s %v, want NXDOMAIN", dns.RcodeToString[r.Rcode], answers(r))
	}
	if s1, s2 := soaSerial(t, r), soaSerial(t, ask(t, "udp", addr, "nodemgr.", dns.TypeSOA)); s1 != s2 || s1 < 2 {
		t.Errorf("SOA serials %d, %d: want the same, counting Sets", s1, s2)
	}
	set(nil)
	if r := ask(t, "udp", addr, "web.shop.nodemgr.", dns.TypeA); r.Rcode != dns.RcodeNameError {
		t.Errorf("after Set(nil): A web.shop.nodemgr. = %s, want NXDOMAIN", dns.RcodeToString[r.Rcode])
	}
}

func soaSerial(t *testing.T, r *dns.Msg) uint32 {
	t.Helper()
	for _, rr := range slices.Concat(r.Answer, r.Ns) {
		if soa, ok := rr.(*dns.SOA); ok {
			return soa.Serial
		}
	}
	t.Fatalf("no SOA in %v", r)
	return 0
}

// TestTruncate checks that a UDP answer fits the size the client said it
// takes, and says so when it was cut.
func TestTruncate(t *testing.T) {
	s, addr := start(t, Config{})
	var many []netip.Addr
	for i := range 100 {
		many = append(many, netip.AddrFrom4([4]byte{10, 1, 0, byte(i)}))
	}
	if err := s.Set(map[string][]netip.Addr{"many.nodemgr": many}); err != nil {
		t.Fatal(err)
	}
	edns := new(dns.Msg).SetQuestion("many.nodemgr.", dns.TypeA)
	edns.SetEdns0(4096, false)
	for _, tc := range []struct {
		name      string
		network   string
		m         *dns.Msg
		truncated bool
	}{
		{"udp", "udp", new(dns.Msg).SetQuestion("many.nodemgr.", dns.TypeA), true},
		{"udp edns0 4096", "udp", edns, false},
		{"tcp", "tcp", new(dns.Msg).SetQuestion("many.nodemgr.", dns.TypeA), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := exchange(t, tc.network, addr, tc.m)
			n := len(answers(r))
			if r.Truncated != tc.truncated || tc.truncated == (n == len(many)) {
				t.Errorf("TC %v with %d of %d answers, want TC %v", r.Truncated, n, len(many), tc.truncated)
			}
			if (tc.m.IsEdns0() != nil) != (r.IsEdns0() != nil) {
				t.Errorf("reply OPT %v for query OPT %v: want one only with the other", r.IsEdns0(), tc.m.IsEdns0())
			}
		})
	}
}

// TestConcurrentSet checks that queries see one table or the next, never
// a mix, while Sets come fast (run it with -race).
func TestConcurrentSet(t *testing.T) {
	s, addr := start(t, Config{})
	gen := func(k int) map[string][]netip.Addr {
		b := byte(k)
		return map[string][]netip.Addr{
			"web.shop.nodemgr": {netip.AddrFrom4([4]byte{10, b, 0, 1}), netip.AddrFrom4([4]byte{10, b, 0, 2})},
			"db.shop.nodemgr":  {netip.AddrFrom4([4]byte{10, b, 1, 1})},
		}
	}
	if err := s.Set(gen(0)); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var setter sync.WaitGroup
	setter.Go(func() {
		for k := 1; ; k++ {
			select {
			case <-stop:
				return
			default:
			}
			if err := s.Set(gen(k)); err != nil {
				t.Errorf("Set(gen %d) = %v", k, err)
				return
			}
		}
	})
	var queriers sync.WaitGroup
	for range 4 {
		queriers.Go(func() {
			c := &dns.Client{Net: "udp", Timeout: 5 * time.Second}
			m := new(dns.Msg).SetQuestion("web.shop.nodemgr.", dns.TypeA)
			for range 100 {
				r, _, err := c.Exchange(m, addr)
				if err != nil {
					t.Errorf("query: %v", err)
					return
				}
				if got := answers(r); len(got) != 2 || !sameGen(got) {
					t.Errorf("A web.shop.nodemgr. = %v, want two addresses of one Set", got)
				}
				if got := s.Lookup("web.shop.nodemgr"); len(got) != 2 || got[0].As4()[1] != got[1].As4()[1] {
					t.Errorf("Lookup(%q) = %v, want two addresses of one Set", "web.shop.nodemgr", got)
				}
			}
		})
	}
	queriers.Wait()
	close(stop)
	setter.Wait()
}

// sameGen says whether addresses 10.k.x.y all have the same k.
func sameGen(addrs []string) bool {
	k := func(a string) string { return strings.Split(a, ".")[1] }
	for _, a := range addrs {
		if k(a) != k(addrs[0]) {
			return false
		}
	}
	return true
}

func BenchmarkAnswer(b *testing.B) {
	s, addr := start(b, Config{})
	if err := s.Set(map[string][]netip.Addr{"web.shop.nodemgr": ips("10.0.0.1", "10.0.0.2", "fd00::1")}); err != nil {
		b.Fatal(err)
	}
	c := &dns.Client{Net: "udp", Timeout: 5 * time.Second}
	conn, err := c.Dial(addr)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	m := new(dns.Msg).SetQuestion("web.shop.nodemgr.", dns.TypeA)
	for b.Loop() {
		m.Id = dns.Id()
		r, _, err := c.ExchangeWithConn(m, conn)
		if err != nil {
			b.Fatal(err)
		}
		if len(r.Answer) != 2 {
			b.Fatalf("answers = %v, want 2", r.Answer)
		}
	}
}
