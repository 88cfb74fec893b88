package mapping

import (
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
)

// Step is one change to Extra and the layer that made it, so tools can say
// why a key has its value. Steps come in the order they happened; the last
// step for a key set its final value.
type Step struct {
	// Layer is "template", "overrides.all", "overrides.<provider>" or
	// "mapping[i].overrides.all|<provider>".
	Layer string `json:"layer"`
	// Matched says what a mapping rule matched, e.g. `image="ubuntu:24.04"`.
	Matched string `json:"matched,omitempty"`
	// Pass is the mapping pass, from 1; 0 for template layers.
	Pass    int    `json:"pass,omitempty"`
	Key     string `json:"key"`
	Value   any    `json:"value,omitempty"`
	Old     any    `json:"old,omitempty"` // nil: the key was not set
	Removed bool   `json:"removed,omitempty"`
}

func (s Step) String() string {
	var b strings.Builder
	b.WriteString(s.Layer + ": ")
	if s.Removed {
		b.WriteString(s.Key + " removed")
	} else {
		b.WriteString(s.Key + " = " + formatValue(s.Value))
	}
	var notes []string
	if s.Old != nil {
		notes = append(notes, "was "+formatValue(s.Old))
	}
	if s.Matched != "" {
		notes = append(notes, "matched "+s.Matched)
	}
	if s.Pass > 0 {
		notes = append(notes, fmt.Sprintf("pass %d", s.Pass))
	}
	if len(notes) > 0 {
		b.WriteString(" (" + strings.Join(notes, "; ") + ")")
	}
	return b.String()
}

func formatValue(v any) string {
	if b, err := json.Marshal(v); err == nil {
		return string(b)
	}
	return fmt.Sprintf("%v", v)
}

// Set lays value over extra[key] for layer, removing the key when value is
// nil, and returns the Step, or false if nothing changed. Package template
// uses it for its own layers so that every layer follows the same rules.
func Set(extra map[string]any, layer, key string, value any) (Step, bool) {
	old, had := extra[key]
	if value == nil {
		if !had {
			return Step{}, false
		}
		delete(extra, key)
		return Step{Layer: layer, Key: key, Old: old, Removed: true}, true
	}
	if had && reflect.DeepEqual(old, value) {
		return Step{}, false
	}
	extra[key] = value
	return Step{Layer: layer, Key: key, Value: value, Old: old}, true
}

// LoopError reports mapping rules that keep setting values which make each
// other match again. It is an errdefs.ErrInvalid naming the first rule.
type LoopError struct {
	Rules  []int  // the rules in the cycle, in the order they fired
	Reason string // the chain, e.g. `mapping[0] sets image="y", which makes mapping[1] set ...`
}

func (e *LoopError) Error() string { return e.field() + ": " + e.Reason }

func (e *LoopError) field() string {
	if len(e.Rules) == 0 {
		return "mapping"
	}
	return fmt.Sprintf("mapping[%d]", e.Rules[0])
}

// Is makes errors.Is(err, errdefs.ErrInvalid) true.
func (e *LoopError) Is(target error) bool { return target == errdefs.ErrInvalid }

// As lets errors.As find an *errdefs.FieldError naming the first rule.
func (e *LoopError) As(target any) bool {
	fe, ok := target.(**errdefs.FieldError)
	if ok {
		*fe = &errdefs.FieldError{Field: e.field(), Reason: e.Reason}
	}
	return ok
}

// firing is one time a rule changed Extra: what it wrote, and which
// firings had set the fields it matched (nil: not set by a rule).
type firing struct {
	rule    int
	wrote   map[string]any
	causes  map[string]*firing
	closure []int // sorted rules this firing depends on, itself included
}

// Apply returns extra rewritten by rules for provider, and the changes it
// made in order. extra is not modified. See the package documentation for
// the order and for loops.
func Apply(extra map[string]any, provider string, rules []Rule) (map[string]any, []Step, error) {
	if err := CheckProvider("provider", provider); err != nil {
		return nil, nil, err
	}
	if err := Validate(rules); err != nil {
		return nil, nil, err
	}
	return apply(extra, provider, rules)
}

// apply is Apply for a known provider and valid rules.
func apply(extra map[string]any, provider string, rules []Rule) (map[string]any, []Step, error) {
	state := maps.Clone(extra)
	if state == nil {
		state = map[string]any{}
	}
	var steps []Step
	writer := map[string]*firing{} // key → the firing that set its current value
	ends := map[string]int{fingerprint(state): 0}
	var fired [][]int // rules that fired, per pass
	limit := 2*len(rules) + 2
	for pass := 1; ; pass++ {
		if pass > limit {
			return nil, nil, &LoopError{Rules: uniq(fired[len(fired)-1]),
				Reason: fmt.Sprintf("rules loop: Extra has not settled after %d passes", limit)}
		}
		start, startCauses := fingerprint(state), causeprint(writer)
		var passSteps []Step
		var passFired []int
		for i, r := range rules {
			if !r.matches(state) {
				continue
			}
			// The rule's layers act as one: all, then the provider's over it.
			layerOf, overlay := map[string]string{}, map[string]any{}
			for _, layer := range []string{All, provider} {
				for k, v := range r.Overrides[layer] {
					layerOf[k], overlay[k] = fmt.Sprintf("mapping[%d].overrides.%s", i, layer), v
				}
			}
			next := maps.Clone(state)
			var changed []Step
			for _, k := range sortedKeys(overlay) {
				if s, ok := Set(next, layerOf[k], k, overlay[k]); ok {
					changed = append(changed, s)
				}
			}
			if len(changed) == 0 {
				continue
			}
			f := &firing{rule: i, wrote: map[string]any{}, causes: map[string]*firing{}}
			matched := make([]string, 0, len(r.Match))
			for _, k := range sortedKeys(r.Match) {
				f.causes[k] = writer[k]
				matched = append(matched, fmt.Sprintf("%s=%s", k, formatValue(state[k])))
			}
			if chain := findCycle(f); chain != nil {
				var set []string
				for _, c := range changed {
					set = append(set, c.Key+"="+formatValue(next[c.Key]))
				}
				return nil, nil, loopError(append(chain, f), strings.Join(set, " "))
			}
			f.closure = closure(f)
			for j := range changed {
				changed[j].Matched = strings.Join(matched, " ")
				changed[j].Pass = pass
				f.wrote[changed[j].Key] = next[changed[j].Key]
				writer[changed[j].Key] = f
			}
			state = next
			passSteps = append(passSteps, changed...)
			passFired = append(passFired, i)
		}
		fired = append(fired, passFired)
		end := fingerprint(state)
		if end == start {
			// A pass that ends where it began is the result, once the
			// causes are stable too: the rules that fired in it only set
			// what later rules set back, and one more pass would repeat
			// it. While causes still change, run it again so findCycle
			// sees chains that close within a pass.
			if causeprint(writer) == startCauses {
				return state, steps, nil
			}
			continue
		}
		if p, ok := ends[end]; ok {
			var rs []int
			for _, f := range fired[p:] {
				rs = append(rs, f...)
			}
			return nil, nil, &LoopError{Rules: uniq(rs),
				Reason: fmt.Sprintf("rules loop: Extra after pass %d is the same as after pass %d", pass, p)}
		}
		ends[end] = pass
		steps = append(steps, passSteps...)
	}
}

// findCycle returns the chain of earlier firings, oldest first, through
// which f's rule depends on its own earlier firing by way of at least one
// other rule; nil if there is none.
func findCycle(f *firing) []*firing {
	type visit struct {
		f     *firing
		other bool
	}
	seen := map[visit]bool{}
	var chain []*firing
	var walk func(g *firing, other bool) bool
	walk = func(g *firing, other bool) bool {
		if g == nil {
			return false
		}
		if g.rule == f.rule && other {
			chain = append(chain, g)
			return true
		}
		if seen[visit{g, other}] {
			return false
		}
		seen[visit{g, other}] = true
		other = other || g.rule != f.rule
		for _, k := range sortedKeys(g.causes) {
			if walk(g.causes[k], other) {
				chain = append(chain, g)
				return true
			}
		}
		return false
	}
	for _, k := range sortedKeys(f.causes) {
		if walk(f.causes[k], false) {
			return chain
		}
	}
	return nil
}

// loopError describes a chain of firings whose last firing's rule is its
// first's; set is what that last firing would set again.
func loopError(chain []*firing, set string) *LoopError {
	e := &LoopError{}
	var b strings.Builder
	for i, f := range chain {
		e.Rules = append(e.Rules, f.rule)
		if i == len(chain)-1 {
			fmt.Fprintf(&b, "which makes mapping[%d] match again and set %s", f.rule, set)
			break
		}
		// The key this firing wrote that the next one matched.
		next := chain[i+1]
		var set []string
		for _, k := range sortedKeys(next.causes) {
			if next.causes[k] == f {
				set = append(set, fmt.Sprintf("%s=%s", k, formatValue(f.wrote[k])))
			}
		}
		if i == 0 {
			fmt.Fprintf(&b, "rules loop: mapping[%d] sets %s, ", f.rule, strings.Join(set, " "))
		} else {
			fmt.Fprintf(&b, "which makes mapping[%d] set %s, ", f.rule, strings.Join(set, " "))
		}
	}
	e.Rules = e.Rules[:len(e.Rules)-1]
	e.Reason = b.String()
	return e
}

func closure(f *firing) []int {
	set := []int{f.rule}
	for _, c := range f.causes {
		if c != nil {
			set = append(set, c.closure...)
		}
	}
	slices.Sort(set)
	return slices.Compact(set)
}

// fingerprint is a canonical text of m (fmt sorts map keys).
func fingerprint(m map[string]any) string { return fmt.Sprintf("%#v", m) }

// causeprint is a canonical text of which rules each key's value depends on.
func causeprint(writer map[string]*firing) string {
	var b strings.Builder
	for _, k := range sortedKeys(writer) {
		fmt.Fprintf(&b, "%q:%v ", k, writer[k].closure)
	}
	return b.String()
}

func uniq(rs []int) []int {
	rs = slices.Clone(rs)
	slices.Sort(rs)
	return slices.Compact(rs)
}
