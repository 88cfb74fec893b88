package schedule

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
)

// Candidate is one way to get a machine: a template rendered for a
// provider. Sizes, price and arch come from the rendered template and the
// pool; the observed fields are filled in by the caller. A zero (or
// negative, or NaN) size means unknown; a price is unknown when nil (or
// negative, or NaN), and 0 is a real price: free.
type Candidate struct {
	Pool     string   // the pool offering it; "" when not from a pool
	Template string   // template name
	Provider string   // provider name (local, docker, libvirt, aws)
	Price    *float64 // per hour, as the pool says; nil = unknown, 0 = free
	CPUs     float64  // what one machine of it has (the rendered cpu); 0 = unknown
	MemoryMB int64    // the rendered memoryMB; 0 = unknown
	Arch     string   // "" = unknown, taken to be any
	Tags     []string // tags its agents get
	Local    bool     // the provider runs machines on the server's own host

	// BootP50 is the measured provision-to-registered median; 0 = not
	// measured yet.
	BootP50 time.Duration
	// Machines is how many machines of this candidate are alive now.
	Machines int
	// BackoffUntil, after failures, is when the candidate may be tried
	// again; at that instant it may. BackoffReason says what failed.
	BackoffUntil  time.Time
	BackoffReason string
	// Unavailable, when not empty, says why the candidate cannot be used
	// at all (provider not configured, template missing, pool paused).
	Unavailable string
}

// Request is what the work needs from one machine.
type Request struct {
	CPUs     float64  // 0 = any
	MemoryMB int64    // 0 = any
	Tags     []string // the machine's agent must carry all of them
	Arch     string   // "" = any
	Policy   string   // one of Policies; "" = Cheapest
}

// Quota is a pool's limits and what its machines use of them now (every
// machine of the pool that is alive or on its way, whatever its
// candidate). A limit of 0 (or less) is no limit, so the zero Quota limits
// nothing; a pool that may make no machine at all is for the caller to
// mark Unavailable on its candidates. Candidates whose pool has no entry
// in the quotas map, and those with Pool "", are under no quota.
type Quota struct {
	MaxMachines int
	MaxCPUs     float64
	MaxMemoryMB int64

	Machines int
	CPUs     float64
	MemoryMB int64
}

// Verdict is what Explain says of one candidate.
type Verdict struct {
	Candidate
	Feasible bool
	// Reasons says why an infeasible candidate cannot serve, one line per
	// reason, all of them (not only the first); empty when feasible.
	Reasons []string
	// Rank is the 1-based place among the feasible candidates; 0 when
	// infeasible.
	Rank int
	// Why says in one line what the rank rests on ("cheapest: $0.10/h"),
	// whether it was a tie broken by name, and whether the size is
	// unknown; empty when infeasible.
	Why string
}

// Validate checks a request: a known policy (or none), no negative
// CPUs or memory, no empty tag. Its errors are errdefs field errors.
func (r Request) Validate() error {
	if r.Policy != "" && !slices.Contains(Policies, r.Policy) {
		return errdefs.Field("policy", "unknown policy %q; want one of %s", r.Policy, strings.Join(Policies, ", "))
	}
	if r.CPUs < 0 || math.IsNaN(r.CPUs) || math.IsInf(r.CPUs, 0) {
		return errdefs.Field("cpus", "must be a number, 0 or more; got %v", r.CPUs)
	}
	if r.MemoryMB < 0 {
		return errdefs.Field("memory_mb", "must be 0 or more; got %d", r.MemoryMB)
	}
	for i, t := range r.Tags {
		if strings.TrimSpace(t) == "" {
			return errdefs.Field(fmt.Sprintf("tags[%d]", i), "empty tag")
		}
	}
	return nil
}

// policy is the request's policy with the default filled in.
func (r Request) policy() string {
	if r.Policy == "" {
		return Cheapest
	}
	return r.Policy
}

// Explain judges every candidate for req at time now: feasible or not and
// why, and the feasible ones ranked by req's policy. It returns all of
// them, the feasible first in rank order, then the infeasible ordered by
// pool, template and provider name (then as given). The order never
// depends on the order of cands, except between candidates with the same
// three names. Its only error is a request that fails Validate.
func Explain(req Request, cands []Candidate, quotas map[string]Quota, now time.Time) ([]Verdict, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	pol := policies[req.policy()]
	vs := make([]Verdict, len(cands))
	for i, c := range cands {
		q, limited := quotas[c.Pool]
		reasons := infeasible(req, c, q, limited && c.Pool != "", now)
		vs[i] = Verdict{Candidate: c, Feasible: len(reasons) == 0, Reasons: reasons}
	}
	slices.SortStableFunc(vs, func(a, b Verdict) int {
		switch {
		case a.Feasible && !b.Feasible:
			return -1
		case !a.Feasible && b.Feasible:
			return 1
		case a.Feasible:
			if c := pol.compare(req, a.Candidate, b.Candidate); c != 0 {
				return c
			}
		}
		return byName(a.Candidate, b.Candidate)
	})
	for i := range vs {
		v := &vs[i]
		if !v.Feasible {
			break
		}
		v.Rank = i + 1
		v.Why = req.policy() + ": " + pol.why(req, v.Candidate)
		if i > 0 && pol.compare(req, vs[i-1].Candidate, v.Candidate) == 0 {
			v.Why += fmt.Sprintf("; tied with rank %d, then by pool, template, provider name", vs[i-1].Rank)
		}
		if note := sizeNote(v.Candidate); note != "" && !pol.saysSize {
			v.Why += "; " + note
		}
	}
	return vs, nil
}

// Choose returns the best feasible candidate for req by Explain's ranking,
// and false when none is feasible. Its only error is a request that fails
// Validate.
func Choose(req Request, cands []Candidate, quotas map[string]Quota, now time.Time) (Verdict, bool, error) {
	vs, err := Explain(req, cands, quotas, now)
	if err != nil || len(vs) == 0 || !vs[0].Feasible {
		return Verdict{}, false, err
	}
	return vs[0], true, nil
}

// infeasible lists why c cannot serve req now, in a fixed order; none when
// it can. q is c's pool quota when limited.
func infeasible(req Request, c Candidate, q Quota, limited bool, now time.Time) []string {
	var why []string
	if c.Unavailable != "" {
		why = append(why, c.Unavailable)
	}
	if now.Before(c.BackoffUntil) {
		s := "backing off until " + clock(c.BackoffUntil, now)
		if c.BackoffReason != "" {
			s += " after: " + c.BackoffReason
		}
		why = append(why, s)
	}
	if req.Arch != "" && c.Arch != "" && normArch(req.Arch) != normArch(c.Arch) {
		why = append(why, fmt.Sprintf("arch %s, want %s", c.Arch, req.Arch))
	}
	if MilliCPUs(req.CPUs) > 0 && MilliCPUs(c.CPUs) > 0 && MilliCPUs(c.CPUs) < MilliCPUs(req.CPUs) {
		why = append(why, fmt.Sprintf("needs %s, has %s", cpus(req.CPUs), num(c.CPUs)))
	}
	if req.MemoryMB > 0 && c.MemoryMB > 0 && c.MemoryMB < req.MemoryMB {
		why = append(why, fmt.Sprintf("needs %d MB memory, has %d", req.MemoryMB, c.MemoryMB))
	}
	var missing []string
	for _, t := range req.Tags {
		if !slices.Contains(c.Tags, t) && !slices.Contains(missing, t) {
			missing = append(missing, t)
		}
	}
	switch len(missing) {
	case 0:
	case 1:
		why = append(why, "lacks tag "+missing[0])
	default:
		why = append(why, "lacks tags "+strings.Join(missing, ", "))
	}
	if limited {
		why = append(why, overQuota(c, q)...)
	}
	return why
}

// overQuota says why c's pool cannot take one more machine of c's size.
// A size the candidate does not know is not counted against a limit: the
// template did not say, as with the request's own check.
func overQuota(c Candidate, q Quota) []string {
	var why []string
	if q.MaxMachines > 0 && q.Machines >= q.MaxMachines {
		why = append(why, fmt.Sprintf("pool %s at max %d machines", c.Pool, q.MaxMachines))
	}
	if limit := MilliCPUs(q.MaxCPUs); limit > 0 && MilliCPUs(c.CPUs) > 0 && MilliCPUs(q.CPUs)+MilliCPUs(c.CPUs) > limit {
		why = append(why, fmt.Sprintf("pool %s: %s of %s CPUs used, one machine needs %s",
			c.Pool, num(q.CPUs), num(q.MaxCPUs), num(c.CPUs)))
	}
	if q.MaxMemoryMB > 0 && c.MemoryMB > 0 && q.MemoryMB+c.MemoryMB > q.MaxMemoryMB {
		why = append(why, fmt.Sprintf("pool %s: %d of %d MB memory used, one machine needs %d",
			c.Pool, q.MemoryMB, q.MaxMemoryMB, c.MemoryMB))
	}
	return why
}

// byName is the tie-break every policy ends with.
func byName(a, b Candidate) int {
	return cmp.Or(
		strings.Compare(a.Pool, b.Pool),
		strings.Compare(a.Template, b.Template),
		strings.Compare(a.Provider, b.Provider),
	)
}

// sizeNote says which of c's sizes are unknown, or "".
func sizeNote(c Candidate) string {
	switch cpuKnown, memKnown := MilliCPUs(c.CPUs) > 0, c.MemoryMB > 0; {
	case !cpuKnown && !memKnown:
		return "size unknown"
	case !cpuKnown:
		return "CPUs unknown"
	case !memKnown:
		return "memory unknown"
	}
	return ""
}

// normArch maps the names that kernels and image tools use to Go's
// (aarch64 → arm64, x86_64 → amd64), so a libvirt template saying aarch64
// matches an agent reporting arm64.
func normArch(a string) string {
	a = strings.ToLower(strings.TrimSpace(a))
	switch a {
	case "x86_64", "x86-64", "x64":
		return "amd64"
	case "aarch64", "arm64v8":
		return "arm64"
	}
	return a
}

// MilliCPUs is CPUs in thousandths, so that sums and ties compare exactly
// (0.1+0.2 is 0.3 here); NaN, negatives and less than a thousandth are 0,
// unknown. Placing ensembles counts CPUs the same way.
func MilliCPUs(cpus float64) int64 {
	if !(cpus > 0) {
		return 0
	}
	if cpus > math.MaxInt64/2000 {
		return math.MaxInt64 / 2
	}
	return int64(math.Round(cpus * 1000))
}

// num prints a CPU count as short as it goes: 2, 0.5.
func num(f float64) string { return fmt.Sprintf("%v", f) }

// cpus prints a CPU count with its unit: "1 CPU", "2 CPUs".
func cpus(f float64) string {
	if f == 1 {
		return "1 CPU"
	}
	return num(f) + " CPUs"
}

// clock prints t in now's location: the time of day when it is the same
// day, else the date too.
func clock(t, now time.Time) string {
	t = t.In(now.Location())
	if y, m, d := t.Date(); y == now.Year() && m == now.Month() && d == now.Day() {
		return t.Format(time.TimeOnly)
	}
	return t.Format(time.DateTime)
}
