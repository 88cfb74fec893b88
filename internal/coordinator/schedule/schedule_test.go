package schedule

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
)

var now = time.Date(2025, 3, 4, 10, 30, 0, 0, time.UTC)

// sized is a candidate with a known size and the linux tag, so that only
// what a test sets decides its verdict.
func sized(pool, template, provider string) Candidate {
	return Candidate{Pool: pool, Template: template, Provider: provider, CPUs: 4, MemoryMB: 8192, Tags: []string{"linux"}}
}

// with returns c changed by f.
func with(c Candidate, f func(*Candidate)) Candidate {
	f(&c)
	return c
}

func ptr[T any](v T) *T { return &v }

func name(c Candidate) string { return c.Pool + "/" + c.Template + "@" + c.Provider }

// summary is one line per verdict: "RANK NAME: WHY" for the feasible,
// "- NAME: REASONS" for the others.
func summary(vs []Verdict) []string {
	var out []string
	for _, v := range vs {
		if v.Feasible {
			out = append(out, fmt.Sprintf("%d %s: %s", v.Rank, name(v.Candidate), v.Why))
		} else {
			out = append(out, fmt.Sprintf("- %s: %s", name(v.Candidate), strings.Join(v.Reasons, "; ")))
		}
	}
	return out
}

func TestExplainPolicies(t *testing.T) {
	price := func(c Candidate, p float64) Candidate { return with(c, func(c *Candidate) { c.Price = &p }) }
	boot := func(c Candidate, d time.Duration) Candidate { return with(c, func(c *Candidate) { c.BootP50 = d }) }
	alive := func(c Candidate, n int) Candidate { return with(c, func(c *Candidate) { c.Machines = n }) }
	size := func(c Candidate, cpus float64, mem int64) Candidate {
		return with(c, func(c *Candidate) { c.CPUs, c.MemoryMB = cpus, mem })
	}
	local := func(c Candidate) Candidate { return with(c, func(c *Candidate) { c.Local = true }) }
	busy := with(sized("p", "busy", "aws"), func(c *Candidate) { c.Unavailable = "provider aws not configured" })

	tests := []struct {
		name  string
		req   Request
		cands []Candidate
		want  []string
	}{
		{
			name: "cheapest, unknown price last, tie by name",
			req:  Request{Policy: Cheapest},
			cands: []Candidate{
				price(sized("p", "a", "docker"), 0.20),
				price(sized("p", "d", "docker"), 0.10),
				sized("p", "c", "docker"),
				price(sized("p", "b", "docker"), 0.10),
				price(sized("p", "e", "aws"), 0.0042),
			},
			want: []string{
				"1 p/e@aws: cheapest: $0.0042/h",
				"2 p/b@docker: cheapest: $0.10/h",
				"3 p/d@docker: cheapest: $0.10/h; tied with rank 2, then by pool, template, provider name",
				"4 p/a@docker: cheapest: $0.20/h",
				"5 p/c@docker: cheapest: price unknown, ranked after priced ones",
			},
		},
		{
			// A price of 0 is free, not unknown: it ranks first.
			name: "cheapest, free first, unknown last",
			req:  Request{Policy: Cheapest},
			cands: []Candidate{
				price(sized("p", "a", "aws"), 0.01),
				sized("p", "b", "docker"),
				price(sized("p", "c", "local"), 0),
			},
			want: []string{
				"1 p/c@local: cheapest: $0.00/h",
				"2 p/a@aws: cheapest: $0.01/h",
				"3 p/b@docker: cheapest: price unknown, ranked after priced ones",
			},
		},
		{
			name: "no policy is cheapest",
			req:  Request{},
			cands: []Candidate{
				price(sized("p", "a", "docker"), 2),
				price(sized("p", "b", "docker"), 1),
			},
			want: []string{
				"1 p/b@docker: cheapest: $1.00/h",
				"2 p/a@docker: cheapest: $2.00/h",
			},
		},
		{
			name: "cheapest ties broken by pool, then template, then provider",
			req:  Request{Policy: Cheapest},
			cands: []Candidate{
				sized("q", "a", "aws"),
				sized("p", "b", "aws"),
				sized("p", "a", "libvirt"),
				sized("p", "a", "docker"),
			},
			want: []string{
				"1 p/a@docker: cheapest: price unknown, ranked after priced ones",
				"2 p/a@libvirt: cheapest: price unknown, ranked after priced ones; tied with rank 1, then by pool, template, provider name",
				"3 p/b@aws: cheapest: price unknown, ranked after priced ones; tied with rank 2, then by pool, template, provider name",
				"4 q/a@aws: cheapest: price unknown, ranked after priced ones; tied with rank 3, then by pool, template, provider name",
			},
		},
		{
			name: "unknown size is feasible and said",
			req:  Request{CPUs: 64, MemoryMB: 1 << 20, Policy: Cheapest},
			cands: []Candidate{
				price(size(sized("p", "a", "docker"), 0, 0), 0.1),
				price(size(sized("p", "b", "docker"), 0, 1<<21), 0.2),
				price(size(sized("p", "c", "docker"), 128, 0), 0.3),
			},
			want: []string{
				"1 p/a@docker: cheapest: $0.10/h; size unknown",
				"2 p/b@docker: cheapest: $0.20/h; CPUs unknown",
				"3 p/c@docker: cheapest: $0.30/h; memory unknown",
			},
		},
		{
			name: "fastest, unmeasured after measured",
			req:  Request{Policy: Fastest},
			cands: []Candidate{
				boot(sized("p", "slow", "libvirt"), 40*time.Second),
				sized("p", "new2", "aws"),
				boot(sized("p", "quick", "docker"), 1234567*time.Microsecond),
				sized("p", "new1", "aws"),
				boot(sized("p", "instant", "local"), 850*time.Millisecond),
			},
			want: []string{
				"1 p/instant@local: fastest: p50 850ms",
				"2 p/quick@docker: fastest: p50 1.235s",
				"3 p/slow@libvirt: fastest: p50 40s",
				"4 p/new1@aws: fastest: unmeasured, ranked after measured ones",
				"5 p/new2@aws: fastest: unmeasured, ranked after measured ones; tied with rank 4, then by pool, template, provider name",
			},
		},
		{
			name: "fastest tries an unmeasured one when no measured one is feasible",
			req:  Request{Policy: Fastest, Tags: []string{"linux"}},
			cands: []Candidate{
				with(boot(sized("p", "quick", "docker"), time.Second), func(c *Candidate) {
					c.BackoffUntil, c.BackoffReason = now.Add(time.Minute), "bootstrap timed out"
				}),
				sized("p", "new", "aws"),
			},
			want: []string{
				"1 p/new@aws: fastest: unmeasured, ranked after measured ones",
				"- p/quick@docker: backing off until 10:31:00 after: bootstrap timed out",
			},
		},
		{
			name: "spread, fewest machines first",
			req:  Request{Policy: Spread},
			cands: []Candidate{
				alive(sized("p", "a", "docker"), 3),
				alive(sized("p", "b", "libvirt"), 0),
				alive(sized("p", "c", "aws"), 1),
				alive(sized("p", "d", "aws"), 1),
			},
			want: []string{
				"1 p/b@libvirt: spread: 0 machines alive",
				"2 p/c@aws: spread: 1 machine alive",
				"3 p/d@aws: spread: 1 machine alive; tied with rank 2, then by pool, template, provider name",
				"4 p/a@docker: spread: 3 machines alive",
			},
		},
		{
			name: "binpack, smallest fit first, then most machines",
			req:  Request{CPUs: 2, MemoryMB: 2048, Policy: Binpack},
			cands: []Candidate{
				size(sized("p", "big", "aws"), 8, 16384),
				size(sized("p", "exact", "docker"), 2, 2048),
				alive(size(sized("p", "exact-busy", "docker"), 2, 2048), 3),
				size(sized("p", "roomy-mem", "docker"), 2, 4096),
				size(sized("p", "mid", "libvirt"), 4, 4096),
				size(sized("p", "unknown", "local"), 0, 0),
				size(sized("p", "cpu-unknown", "local"), 0, 2048),
				size(sized("p", "mem-unknown", "local"), 2, 0),
				size(sized("p", "small", "local"), 1, 1024),
			},
			want: []string{
				"1 p/exact-busy@docker: binpack: spare 0 CPUs, spare 0 MB memory; 3 machines alive",
				"2 p/exact@docker: binpack: spare 0 CPUs, spare 0 MB memory; 0 machines alive",
				"3 p/roomy-mem@docker: binpack: spare 0 CPUs, spare 2048 MB memory; 0 machines alive",
				"4 p/mem-unknown@local: binpack: spare 0 CPUs, memory unknown (ranked after known sizes); 0 machines alive",
				"5 p/mid@libvirt: binpack: spare 2 CPUs, spare 2048 MB memory; 0 machines alive",
				"6 p/big@aws: binpack: spare 6 CPUs, spare 14336 MB memory; 0 machines alive",
				"7 p/cpu-unknown@local: binpack: CPUs unknown, spare 0 MB memory (ranked after known sizes); 0 machines alive",
				"8 p/unknown@local: binpack: CPUs unknown, memory unknown (ranked after known sizes); 0 machines alive",
				"- p/small@local: needs 2 CPUs, has 1; needs 2048 MB memory, has 1024",
			},
		},
		{
			name: "binpack with fractional CPUs and a full tie",
			req:  Request{CPUs: 0.5, Policy: Binpack},
			cands: []Candidate{
				size(sized("p", "b", "docker"), 1, 1024),
				size(sized("p", "a", "docker"), 1, 1024),
				size(sized("p", "half", "docker"), 0.5, 4096),
			},
			want: []string{
				"1 p/half@docker: binpack: spare 0 CPUs, spare 4096 MB memory; 0 machines alive",
				"2 p/a@docker: binpack: spare 0.5 CPUs, spare 1024 MB memory; 0 machines alive",
				"3 p/b@docker: binpack: spare 0.5 CPUs, spare 1024 MB memory; 0 machines alive; tied with rank 2, then by pool, template, provider name",
			},
		},
		{
			name: "prefer-local, then cheapest",
			req:  Request{Policy: PreferLocal},
			cands: []Candidate{
				price(sized("p", "cloud", "aws"), 0.01),
				sized("p", "vm", "libvirt"),
				local(sized("p", "host", "local")),
				local(price(sized("p", "box", "docker"), 0.05)),
				busy,
			},
			want: []string{
				"1 p/box@docker: prefer-local: local, $0.05/h",
				"2 p/host@local: prefer-local: local, price unknown, ranked after priced ones",
				"3 p/cloud@aws: prefer-local: remote, $0.01/h",
				"4 p/vm@libvirt: prefer-local: remote, price unknown, ranked after priced ones",
				"- p/busy@aws: provider aws not configured",
			},
		},
		{
			name:  "no candidates",
			req:   Request{Policy: Spread},
			cands: nil,
			want:  nil,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			vs, err := Explain(tc.req, tc.cands, nil, now)
			if err != nil {
				t.Fatalf("Explain(%+v) error: %v", tc.req, err)
			}
			if diff := cmp.Diff(tc.want, summary(vs)); diff != "" {
				t.Errorf("Explain(%+v) mismatch (-want +got):\n%s", tc.req, diff)
			}
		})
	}
}

func TestExplainReasons(t *testing.T) {
	base := Candidate{Pool: "p", Template: "t", Provider: "docker", CPUs: 2, MemoryMB: 2048, Arch: "amd64", Tags: []string{"linux", "ssd"}}
	req := Request{CPUs: 2, MemoryMB: 2048, Tags: []string{"linux"}, Arch: "amd64"}
	change := func(f func(*Candidate)) Candidate { return with(base, f) }
	ask := func(f func(*Request)) Request {
		r := req
		f(&r)
		return r
	}

	tests := []struct {
		name   string
		req    Request
		cand   Candidate
		quotas map[string]Quota
		want   []string // nil: feasible
	}{
		{name: "exact fit", req: req, cand: base},
		{name: "empty request fits anything", req: Request{}, cand: base},
		{
			name: "unavailable",
			req:  req,
			cand: change(func(c *Candidate) { c.Unavailable = "provider aws not configured" }),
			want: []string{"provider aws not configured"},
		},
		{
			name: "backing off",
			req:  req,
			cand: change(func(c *Candidate) {
				c.BackoffUntil, c.BackoffReason = now.Add(12*time.Minute+time.Second), "bootstrap timed out"
			}),
			want: []string{"backing off until 10:42:01 after: bootstrap timed out"},
		},
		{
			name: "backing off, no reason given",
			req:  req,
			cand: change(func(c *Candidate) { c.BackoffUntil = now.Add(time.Nanosecond) }),
			want: []string{"backing off until 10:30:00"},
		},
		{
			name: "backing off until another day, in now's location",
			req:  req,
			cand: change(func(c *Candidate) {
				c.BackoffUntil = time.Date(2025, 3, 5, 11, 0, 0, 0, time.FixedZone("CET", 3600))
				c.BackoffReason = "quota exceeded"
			}),
			want: []string{"backing off until 2025-03-05 10:00:00 after: quota exceeded"},
		},
		{
			name: "backoff expiring at now",
			req:  req,
			cand: change(func(c *Candidate) { c.BackoffUntil, c.BackoffReason = now, "boot failed" }),
		},
		{
			name: "backoff expired",
			req:  req,
			cand: change(func(c *Candidate) { c.BackoffUntil, c.BackoffReason = now.Add(-time.Second), "boot failed" }),
		},
		{
			name: "wrong arch",
			req:  req,
			cand: change(func(c *Candidate) { c.Arch = "arm64" }),
			want: []string{"arch arm64, want amd64"},
		},
		{
			name: "arch aliases match",
			req:  ask(func(r *Request) { r.Arch = "arm64" }),
			cand: change(func(c *Candidate) { c.Arch = "aarch64" }),
		},
		{
			name: "arch alias and case",
			req:  req,
			cand: change(func(c *Candidate) { c.Arch = "X86_64" }),
		},
		{name: "unknown arch is any", req: req, cand: change(func(c *Candidate) { c.Arch = "" })},
		{name: "any arch wanted", req: ask(func(r *Request) { r.Arch = "" }), cand: change(func(c *Candidate) { c.Arch = "riscv64" })},
		{
			name: "too few CPUs",
			req:  req,
			cand: change(func(c *Candidate) { c.CPUs = 1 }),
			want: []string{"needs 2 CPUs, has 1"},
		},
		{
			name: "too few CPUs, one wanted",
			req:  ask(func(r *Request) { r.CPUs = 1 }),
			cand: change(func(c *Candidate) { c.CPUs = 0.5 }),
			want: []string{"needs 1 CPU, has 0.5"},
		},
		{
			name: "too little memory",
			req:  req,
			cand: change(func(c *Candidate) { c.MemoryMB = 1024 }),
			want: []string{"needs 2048 MB memory, has 1024"},
		},
		{
			name: "unknown size fits any request",
			req:  ask(func(r *Request) { r.CPUs, r.MemoryMB = 512, 1<<30 }),
			cand: change(func(c *Candidate) { c.CPUs, c.MemoryMB = 0, 0 }),
		},
		{
			name: "lacks a tag",
			req:  ask(func(r *Request) { r.Tags = []string{"linux", "gpu"} }),
			cand: base,
			want: []string{"lacks tag gpu"},
		},
		{
			name: "lacks tags, each said once",
			req:  ask(func(r *Request) { r.Tags = []string{"gpu", "linux", "big", "gpu"} }),
			cand: base,
			want: []string{"lacks tags gpu, big"},
		},
		{
			name:   "pool at max machines",
			req:    req,
			cand:   base,
			quotas: map[string]Quota{"p": {MaxMachines: 4, Machines: 4}},
			want:   []string{"pool p at max 4 machines"},
		},
		{
			name:   "pool under max machines",
			req:    req,
			cand:   base,
			quotas: map[string]Quota{"p": {MaxMachines: 4, Machines: 3}},
		},
		{
			name:   "pool out of CPUs",
			req:    req,
			cand:   base,
			quotas: map[string]Quota{"p": {MaxCPUs: 4, CPUs: 3}},
			want:   []string{"pool p: 3 of 4 CPUs used, one machine needs 2"},
		},
		{
			name:   "pool CPUs fill up exactly",
			req:    req,
			cand:   base,
			quotas: map[string]Quota{"p": {MaxCPUs: 4, CPUs: 2}},
		},
		{
			name:   "pool fractional CPUs add up exactly",
			req:    Request{},
			cand:   change(func(c *Candidate) { c.CPUs = 0.2 }),
			quotas: map[string]Quota{"p": {MaxCPUs: 0.3, CPUs: 0.1}},
		},
		{
			name:   "pool out of memory",
			req:    req,
			cand:   base,
			quotas: map[string]Quota{"p": {MaxMemoryMB: 4096, MemoryMB: 3072}},
			want:   []string{"pool p: 3072 of 4096 MB memory used, one machine needs 2048"},
		},
		{
			name:   "unknown size is not counted against a pool",
			req:    req,
			cand:   change(func(c *Candidate) { c.CPUs, c.MemoryMB = 0, 0 }),
			quotas: map[string]Quota{"p": {MaxCPUs: 4, CPUs: 4, MaxMemoryMB: 4096, MemoryMB: 4096}},
		},
		{
			name:   "zero quota limits nothing",
			req:    req,
			cand:   base,
			quotas: map[string]Quota{"p": {Machines: 100, CPUs: 100, MemoryMB: 1 << 30}},
		},
		{
			name:   "another pool's quota",
			req:    req,
			cand:   base,
			quotas: map[string]Quota{"q": {MaxMachines: 1, Machines: 1}},
		},
		{
			name:   "no pool, no quota",
			req:    req,
			cand:   change(func(c *Candidate) { c.Pool = "" }),
			quotas: map[string]Quota{"": {MaxMachines: 1, Machines: 1}},
		},
		{
			name: "every reason, in order",
			req:  ask(func(r *Request) { r.Tags = []string{"gpu"} }),
			cand: change(func(c *Candidate) {
				c.Unavailable = "template t missing"
				c.BackoffUntil = now.Add(time.Hour)
				c.BackoffReason = "boot failed"
				c.Arch = "arm64"
				c.CPUs = 1
				c.MemoryMB = 512
			}),
			quotas: map[string]Quota{"p": {MaxMachines: 1, Machines: 1, MaxCPUs: 1, CPUs: 1, MaxMemoryMB: 512, MemoryMB: 512}},
			want: []string{
				"template t missing",
				"backing off until 11:30:00 after: boot failed",
				"arch arm64, want amd64",
				"needs 2 CPUs, has 1",
				"needs 2048 MB memory, has 512",
				"lacks tag gpu",
				"pool p at max 1 machines",
				"pool p: 1 of 1 CPUs used, one machine needs 1",
				"pool p: 512 of 512 MB memory used, one machine needs 512",
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			vs, err := Explain(tc.req, []Candidate{tc.cand}, tc.quotas, now)
			if err != nil {
				t.Fatalf("Explain(%+v) error: %v", tc.req, err)
			}
			if len(vs) != 1 {
				t.Fatalf("Explain(%+v) = %d verdicts, want 1", tc.req, len(vs))
			}
			v := vs[0]
			if diff := cmp.Diff(tc.want, v.Reasons); diff != "" {
				t.Errorf("Explain(%+v) reasons mismatch (-want +got):\n%s", tc.req, diff)
			}
			feasible := tc.want == nil
			if v.Feasible != feasible || (v.Rank == 1) != feasible || (v.Why != "") != feasible {
				t.Errorf("Explain(%+v) = feasible %v, rank %d, why %q; want feasible %v", tc.req, v.Feasible, v.Rank, v.Why, feasible)
			}
			if !cmp.Equal(v.Candidate, tc.cand) {
				t.Errorf("Explain(%+v) changed the candidate (-want +got):\n%s", tc.req, cmp.Diff(tc.cand, v.Candidate))
			}
		})
	}
}

// TestExplainOrder checks that the answer does not depend on the order of
// the candidates: feasible ones by rank, then infeasible ones by name.
func TestExplainOrder(t *testing.T) {
	cands := []Candidate{
		with(sized("p", "d", "docker"), func(c *Candidate) { c.Unavailable = "gone" }),
		with(sized("p", "c", "docker"), func(c *Candidate) { c.Price = ptr(0.3) }),
		with(sized("p", "b", "docker"), func(c *Candidate) { c.Tags = nil }),
		with(sized("p", "a", "docker"), func(c *Candidate) { c.Price = ptr(0.2) }),
		with(sized("o", "z", "docker"), func(c *Candidate) { c.Arch = "arm64" }),
	}
	req := Request{Tags: []string{"linux"}, Arch: "amd64"}
	want := []string{
		"1 p/a@docker: cheapest: $0.20/h",
		"2 p/c@docker: cheapest: $0.30/h",
		"- o/z@docker: arch arm64, want amd64",
		"- p/b@docker: lacks tag linux",
		"- p/d@docker: gone",
	}
	orig := slices.Clone(cands)
	for i := range 25 {
		perm := slices.Clone(cands)
		// Rotate and swap so the runs see different orders.
		perm = append(perm[i%len(perm):], perm[:i%len(perm)]...)
		if i >= len(perm) {
			j := i % len(perm)
			k := (i / len(perm)) % len(perm)
			perm[j], perm[k] = perm[k], perm[j]
		}
		order := make([]string, len(perm))
		for n, c := range perm {
			order[n] = name(c)
		}
		t.Run(strings.Join(order, ","), func(t *testing.T) {
			vs, err := Explain(req, perm, nil, now)
			if err != nil {
				t.Fatalf("Explain(%v) error: %v", order, err)
			}
			if diff := cmp.Diff(want, summary(vs)); diff != "" {
				t.Errorf("Explain(%v) mismatch (-want +got):\n%s", order, diff)
			}
		})
	}
	if diff := cmp.Diff(orig, cands); diff != "" {
		t.Errorf("Explain changed its input (-want +got):\n%s", diff)
	}
}

func TestExplainBadRequest(t *testing.T) {
	tests := []struct {
		name      string
		req       Request
		wantField string
		wantIn    []string // substrings of the message
	}{
		{name: "unknown policy", req: Request{Policy: "random"}, wantField: "policy",
			wantIn: append([]string{`"random"`}, Policies...)},
		{name: "policy is case sensitive", req: Request{Policy: "Cheapest"}, wantField: "policy"},
		{name: "negative cpus", req: Request{CPUs: -1}, wantField: "cpus", wantIn: []string{"-1"}},
		{name: "NaN cpus", req: Request{CPUs: nan()}, wantField: "cpus"},
		{name: "negative memory", req: Request{MemoryMB: -2048}, wantField: "memory_mb", wantIn: []string{"-2048"}},
		{name: "empty tag", req: Request{Tags: []string{"linux", " "}}, wantField: "tags[1]"},
	}
	cands := []Candidate{sized("p", "a", "docker")}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			vs, err := Explain(tc.req, cands, nil, now)
			if err == nil || vs != nil {
				t.Fatalf("Explain(%+v) = %v, %v, want a %s field error", tc.req, vs, err, tc.wantField)
			}
			var fe *errdefs.FieldError
			if !errors.Is(err, errdefs.ErrInvalid) || !errors.As(err, &fe) || fe.Field != tc.wantField {
				t.Fatalf("Explain(%+v) error = %v, want a %s field error", tc.req, err, tc.wantField)
			}
			for _, s := range tc.wantIn {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("Explain(%+v) error = %q, want it to say %q", tc.req, err, s)
				}
			}
			if _, ok, cerr := Choose(tc.req, cands, nil, now); ok || cerr == nil || cerr.Error() != err.Error() {
				t.Errorf("Choose(%+v) = %v, %v, want false, %v", tc.req, ok, cerr, err)
			}
		})
	}
	for _, p := range append([]string{""}, Policies...) {
		if err := (Request{Policy: p, CPUs: 0.5, MemoryMB: 1}).Validate(); err != nil {
			t.Errorf("Validate(policy %q) = %v, want nil", p, err)
		}
	}
}

func nan() float64 {
	zero := 0.0
	return zero / zero
}

func TestChoose(t *testing.T) {
	cheap := with(sized("p", "cheap", "aws"), func(c *Candidate) { c.Price = ptr(0.01) })
	dear := with(sized("p", "dear", "aws"), func(c *Candidate) { c.Price = ptr(1.0) })
	tests := []struct {
		name   string
		cands  []Candidate
		quotas map[string]Quota
		want   string // "" = none
	}{
		{name: "best ranked", cands: []Candidate{dear, cheap}, want: "cheap"},
		{name: "falls back to the next", cands: []Candidate{dear, with(cheap, func(c *Candidate) {
			c.BackoffUntil = now.Add(time.Second)
		})}, want: "dear"},
		{name: "none feasible", cands: []Candidate{with(cheap, func(c *Candidate) { c.Unavailable = "x" })}},
		{name: "pool full", cands: []Candidate{cheap, dear}, quotas: map[string]Quota{"p": {MaxMachines: 2, Machines: 2}}},
		{name: "no candidates"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v, ok, err := Choose(Request{Tags: []string{"linux"}}, tc.cands, tc.quotas, now)
			if err != nil {
				t.Fatalf("Choose(%s) error: %v", tc.name, err)
			}
			if got := v.Template; ok != (tc.want != "") || got != tc.want {
				t.Errorf("Choose(%s) = %q, %v, want %q", tc.name, got, ok, tc.want)
			}
			if ok && (!v.Feasible || v.Rank != 1) {
				t.Errorf("Choose(%s) = feasible %v rank %d, want feasible rank 1", tc.name, v.Feasible, v.Rank)
			}
		})
	}
}

// TestPolicies checks that every listed policy ranks, and that the default
// comes first.
func TestPolicies(t *testing.T) {
	if Policies[0] != Cheapest {
		t.Errorf("Policies[0] = %q, want the default %q", Policies[0], Cheapest)
	}
	if len(policies) != len(Policies) {
		t.Errorf("%d policies rank, %d are listed", len(policies), len(Policies))
	}
	for _, p := range Policies {
		if _, ok := policies[p]; !ok {
			t.Errorf("policy %q is listed but does not rank", p)
		}
	}
}
