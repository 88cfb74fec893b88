package names

import (
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/miekg/dns"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
)

// Zone is the suffix nodemgr's names live under.
const Zone = "nodemgr."

// maxNameLen is the longest name in presentation form with its trailing
// dot: on the wire it takes one byte more, the 255 that RFC 1035 allows.
const maxNameLen = 254

// table is one version of the names. It is never changed once published,
// except for the round-robin counters, so queries read it without locks.
type table struct {
	serial uint32            // counts Sets; the SOA's serial
	names  map[string]*entry // canonical name → its addresses
	nodes  map[string]bool   // every name that exists: the apex, names and their ancestors
}

type entry struct {
	v4, v6 []netip.Addr
	next   atomic.Uint32 // rotates the answers' order from one query to the next
}

func newTable(serial uint32, names map[string]*entry) *table {
	t := &table{serial: serial, names: names, nodes: map[string]bool{Zone: true}}
	for name := range names {
		// Ancestors such as shop.nodemgr. exist too (RFC 8020): a
		// query for them gets NODATA, not NXDOMAIN, which would tell a
		// resolver that nothing below exists either.
		for n := name; n != Zone; n = parent(n) {
			t.nodes[n] = true
		}
	}
	return t
}

// parent drops the first label of a canonical name.
func parent(name string) string {
	_, rest, _ := strings.Cut(name, ".")
	return rest
}

// Set replaces the whole table with records, atomically: queries see the
// old table or the new one, never a mix. Names are taken with or without
// the trailing dot and in any case; each must be under Zone. A name with
// no addresses exists but has no records. On an invalid name or address
// Set returns an error naming it and keeps the table it had.
func (s *Server) Set(records map[string][]netip.Addr) error {
	s.setMu.Lock()
	defer s.setMu.Unlock()
	names := make(map[string]*entry, len(records))
	// In order, so that of several bad names the error names the same one.
	for _, name := range slices.Sorted(maps.Keys(records)) {
		key, err := canonical(name)
		if err != nil {
			return fmt.Errorf("set names: %w", err)
		}
		if names[key] != nil {
			return fmt.Errorf("set names: name %q: the same as another once lowercased: %w", name, errdefs.ErrInvalid)
		}
		e, err := newEntry(records[name])
		if err != nil {
			return fmt.Errorf("set names: name %q: %w", name, err)
		}
		names[key] = e
	}
	t := newTable(s.table.Load().serial+1, names)
	s.table.Store(t)
	s.log.Debug("names set", "names", len(names), "serial", t.serial)
	return nil
}

// Lookup returns the addresses the table has for name, IPv4 first, or nil
// if it has none.
func (s *Server) Lookup(name string) []netip.Addr {
	key, err := canonical(name)
	if err != nil {
		return nil
	}
	e := s.table.Load().names[key]
	if e == nil || len(e.v4)+len(e.v6) == 0 {
		return nil
	}
	return slices.Concat(e.v4, e.v6)
}

// canonical returns name in the table's form: lowercase and fully
// qualified. It must be under Zone, in labels of letters, digits, - and _.
func canonical(name string) (string, error) {
	n := strings.ToLower(name)
	if !strings.HasSuffix(n, ".") {
		n += "."
	}
	if len(n) > maxNameLen {
		return "", fmt.Errorf("name %q: longer than %d characters: %w", name, maxNameLen-1, errdefs.ErrInvalid)
	}
	rel, ok := strings.CutSuffix(n, "."+Zone)
	if !ok {
		return "", fmt.Errorf("name %q: not under %s: %w", name, Zone, errdefs.ErrInvalid)
	}
	for _, label := range strings.Split(rel, ".") {
		if !validLabel(label) {
			return "", fmt.Errorf("name %q: label %q must be 1-63 letters, digits, - or _: %w", name, label, errdefs.ErrInvalid)
		}
	}
	return n, nil
}

func validLabel(label string) bool {
	if len(label) == 0 || len(label) > 63 {
		return false
	}
	for _, c := range []byte(label) {
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// newEntry sorts addrs into IPv4 and IPv6, in the order given, without
// duplicates, which would weigh the round robin.
func newEntry(addrs []netip.Addr) (*entry, error) {
	e := &entry{}
	for _, a := range addrs {
		if !a.IsValid() || a.Zone() != "" {
			return nil, fmt.Errorf("address %q: not an IPv4 or IPv6 address without zone: %w", a, errdefs.ErrInvalid)
		}
		a = a.Unmap() // ::ffff:10.0.0.1 is an IPv4 address, answered as A
		list := &e.v6
		if a.Is4() {
			list = &e.v4
		}
		if !slices.Contains(*list, a) {
			*list = append(*list, a)
		}
	}
	return e, nil
}

// answer builds the authoritative reply to req, whose one question is
// for a name under Zone.
func (t *table) answer(req *dns.Msg, ttl uint32) *dns.Msg {
	resp := new(dns.Msg)
	resp.SetReply(req)
	resp.Authoritative = true
	q := req.Question[0]
	if q.Qclass != dns.ClassINET && q.Qclass != dns.ClassANY {
		resp.Rcode = dns.RcodeRefused
		return resp
	}
	name := strings.ToLower(q.Name)
	if !t.nodes[name] {
		resp.Rcode = dns.RcodeNameError
		resp.Ns = []dns.RR{t.soa(ttl)}
		return resp
	}
	// Answers carry the name as asked: a client that randomised its case
	// (DNS 0x20) checks that it comes back.
	if e := t.names[name]; e != nil {
		n := e.next.Add(1)
		if q.Qtype == dns.TypeA || q.Qtype == dns.TypeANY {
			resp.Answer = appendAddrs(resp.Answer, q.Name, rotate(e.v4, n), ttl)
		}
		if q.Qtype == dns.TypeAAAA || q.Qtype == dns.TypeANY {
			resp.Answer = appendAddrs(resp.Answer, q.Name, rotate(e.v6, n), ttl)
		}
	}
	if name == Zone && q.Qtype == dns.TypeSOA {
		resp.Answer = append(resp.Answer, t.soa(ttl))
	}
	if len(resp.Answer) == 0 {
		resp.Ns = []dns.RR{t.soa(ttl)} // NODATA, cached as RFC 2308 says
	}
	return resp
}

// rotate returns addrs starting at the n'th, wrapping around.
func rotate(addrs []netip.Addr, n uint32) []netip.Addr {
	if len(addrs) < 2 {
		return addrs
	}
	i := int(n % uint32(len(addrs)))
	return slices.Concat(addrs[i:], addrs[:i])
}

func appendAddrs(rrs []dns.RR, name string, addrs []netip.Addr, ttl uint32) []dns.RR {
	for _, a := range addrs {
		if a.Is4() {
			hdr := dns.RR_Header{Name: name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: ttl}
			rrs = append(rrs, &dns.A{Hdr: hdr, A: net.IP(a.AsSlice())})
		} else {
			hdr := dns.RR_Header{Name: name, Rrtype: dns.TypeAAAA, Class: dns.ClassINET, Ttl: ttl}
			rrs = append(rrs, &dns.AAAA{Hdr: hdr, AAAA: net.IP(a.AsSlice())})
		}
	}
	return rrs
}

// soa is the zone's SOA record. Its minimum, the TTL of negative answers,
// is the same short TTL as the names': a name that does not exist yet may
// exist once a replica starts.
func (t *table) soa(ttl uint32) *dns.SOA {
	return &dns.SOA{
		Hdr:     dns.RR_Header{Name: Zone, Rrtype: dns.TypeSOA, Class: dns.ClassINET, Ttl: ttl},
		Ns:      "ns." + Zone,
		Mbox:    "hostmaster." + Zone,
		Serial:  t.serial,
		Refresh: 3600,
		Retry:   600,
		Expire:  86400,
		Minttl:  ttl,
	}
}
