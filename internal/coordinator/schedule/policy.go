package schedule

import (
	"cmp"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// The policies a Request may name. Each ranks the feasible candidates by
// its own key; ties are broken by pool, template and provider name, so a
// ranking never depends on the order the candidates came in.
const (
	// Cheapest ranks by price per hour, lowest first; candidates of
	// unknown price come after every priced one. It is the default.
	Cheapest = "cheapest"
	// Fastest ranks by measured boot time (provision to registered, p50),
	// shortest first. Unmeasured candidates come after every measured
	// one: a pool asks for a machine when work waits, so it takes the one
	// known to come up quickly, and an unmeasured candidate is tried (and
	// so measured) only when no measured one is feasible — when those are
	// backing off, full or unfit — or under another policy. Trying the
	// unknown first would make every new candidate's first boot, which may
	// be slow or broken, the one that waiting work depends on.
	Fastest = "fastest"
	// Spread ranks by machines alive, fewest first, so that successive
	// machines spread over candidates (and their providers).
	Spread = "spread"
	// Binpack ranks the smallest machine that fits first: least spare CPU
	// (the candidate's less the request's), then least spare memory, then
	// most machines alive. A candidate whose size is unknown comes after
	// the known sizes, in that dimension.
	Binpack = "binpack"
	// PreferLocal ranks candidates whose provider runs machines on the
	// server's own host first, then by Cheapest.
	PreferLocal = "prefer-local"
)

// Policies lists every policy, the default first.
var Policies = []string{Cheapest, Fastest, Spread, Binpack, PreferLocal}

// policy is how one policy ranks and explains a feasible candidate.
type policy struct {
	// compare orders two feasible candidates, best first; 0 for a tie.
	compare func(req Request, a, b Candidate) int
	// why says what c's rank rests on, without the policy name.
	why func(req Request, c Candidate) string
	// saysSize is true when why already tells of an unknown size.
	saysSize bool
}

var policies = map[string]policy{
	Cheapest: {compare: byPrice, why: func(_ Request, c Candidate) string { return price(c.Price) }},
	Fastest: {
		compare: func(_ Request, a, b Candidate) int {
			return cmp.Or(unknownLast(a.BootP50 > 0, b.BootP50 > 0), cmp.Compare(max(a.BootP50, 0), max(b.BootP50, 0)))
		},
		why: func(_ Request, c Candidate) string {
			if c.BootP50 <= 0 {
				return "unmeasured, ranked after measured ones"
			}
			return "p50 " + duration(c.BootP50)
		},
	},
	Spread: {
		compare: func(_ Request, a, b Candidate) int { return cmp.Compare(a.Machines, b.Machines) },
		why:     func(_ Request, c Candidate) string { return machines(c.Machines) },
	},
	Binpack: {
		compare: func(req Request, a, b Candidate) int {
			ac, am := spare(req, a)
			bc, bm := spare(req, b)
			return cmp.Or(
				unknownLast(ac >= 0, bc >= 0), cmp.Compare(ac, bc),
				unknownLast(am >= 0, bm >= 0), cmp.Compare(am, bm),
				cmp.Compare(b.Machines, a.Machines),
			)
		},
		why: func(req Request, c Candidate) string {
			spareCPU, spareMem := spare(req, c)
			var parts []string
			if spareCPU >= 0 {
				parts = append(parts, "spare "+cpus(float64(spareCPU)/1000))
			} else {
				parts = append(parts, "CPUs unknown")
			}
			if spareMem >= 0 {
				parts = append(parts, fmt.Sprintf("spare %d MB memory", spareMem))
			} else {
				parts = append(parts, "memory unknown")
			}
			s := strings.Join(parts, ", ")
			if spareCPU < 0 || spareMem < 0 {
				s += " (ranked after known sizes)"
			}
			return s + "; " + machines(c.Machines)
		},
		saysSize: true,
	},
	PreferLocal: {
		compare: func(req Request, a, b Candidate) int {
			return cmp.Or(unknownLast(a.Local, b.Local), byPrice(req, a, b))
		},
		why: func(_ Request, c Candidate) string {
			where := "remote"
			if c.Local {
				where = "local"
			}
			return where + ", " + price(c.Price)
		},
	},
}

// byPrice orders by known price, lowest first (a free one, 0, first of
// all), unknown prices last.
func byPrice(_ Request, a, b Candidate) int {
	ap, aKnown := knownPrice(a.Price)
	bp, bKnown := knownPrice(b.Price)
	return cmp.Or(unknownLast(aKnown, bKnown), cmp.Compare(ap, bp))
}

// knownPrice is *p and true, or 0 and false when p is unknown: nil,
// negative or NaN (so unknowns tie).
func knownPrice(p *float64) (float64, bool) {
	if p == nil || !(*p >= 0) {
		return 0, false
	}
	return *p, true
}

// unknownLast orders a known value before an unknown one.
func unknownLast(aKnown, bKnown bool) int {
	switch {
	case aKnown == bKnown:
		return 0
	case aKnown:
		return -1
	}
	return 1
}

// spare is what one machine of c has beyond req: CPUs in thousandths and
// memory in MB, each -1 when c does not say. A feasible candidate never
// has less than req.
func spare(req Request, c Candidate) (milliCPU, memoryMB int64) {
	milliCPU, memoryMB = -1, -1
	if m := MilliCPUs(c.CPUs); m > 0 {
		milliCPU = max(m-MilliCPUs(req.CPUs), 0)
	}
	if c.MemoryMB > 0 {
		memoryMB = max(c.MemoryMB-req.MemoryMB, 0)
	}
	return milliCPU, memoryMB
}

// price prints a price per hour with at least cents: $0.10/h, $0.0042/h,
// $0.00/h (free).
func price(pp *float64) string {
	p, ok := knownPrice(pp)
	if !ok {
		return "price unknown, ranked after priced ones"
	}
	s := strconv.FormatFloat(p, 'f', -1, 64)
	switch i := strings.IndexByte(s, '.'); {
	case i < 0:
		s += ".00"
	case len(s)-i-1 < 2:
		s += "0"
	}
	return "$" + s + "/h"
}

// duration prints d to the millisecond: 1.234s, 850ms.
func duration(d time.Duration) string {
	if d >= time.Millisecond {
		d = d.Round(time.Millisecond)
	}
	return d.String()
}

// machines says how many machines of a candidate are alive.
func machines(n int) string {
	if n == 1 {
		return "1 machine alive"
	}
	return strconv.Itoa(n) + " machines alive"
}
