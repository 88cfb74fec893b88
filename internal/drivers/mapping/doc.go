// Package mapping rewrites a rendered template's Extra map for one provider:
// generic names such as image "ubuntu:24.04" become what that provider
// needs (an AMI for aws, an ISO for libvirt, an image reference for docker).
// Package template renders a template and then calls Apply; the file format
// is the one from seed 000 and loads unchanged:
//
//	mapping:
//	  - match:
//	      image: "ubuntu:24.04"
//	      match_type: "glob" # glob | exact
//	    overrides:
//	      all:
//	        user: "ubuntu"
//	      aws:
//	        ami: "ami-0a116fa7c861dd5f9"
//
// # Matching
//
// A rule matches when every field under match matches the Extra value of
// the same key; a key missing from Extra never matches. Values compare as
// text (fmt's %v: cpu 2 matches "2"). match_type applies to all fields of
// the rule: exact (the default) compares whole strings, glob uses path.Match
// syntax (* ? [a-z] \x; * does not cross "/"). match_type is the match type,
// never a field to match; it may sit inside match, as in the seed, or beside
// it. Glob patterns are checked when rules are parsed or validated.
//
// # Precedence
//
// Apply runs the rules in file order over the Extra map. For a matching
// rule, overrides.all is laid down and then overrides.<provider>, so the
// provider's value wins over all's for the same key. A value replaces the
// earlier one whole (lists and maps are not merged); a null value removes
// the key. Each rule sees what the rules before it left, so of two matching
// rules that set the same key, the later one wins.
//
// Because a rule can change a field that another rule matches (an alias
// chain: "ubuntu" → "ubuntu:24.04" → an AMI), Apply repeats the pass until
// a whole pass changes nothing. The result is the first map M for which
// one more pass leaves M unchanged.
//
// # Loops
//
// A mapping loops when a rule fires (changes Extra) again because of
// something it set itself by way of another rule: A sets image "y", B
// matches "y" and sets "x", A matches "x" again. Apply tracks which rule
// last set each key and which keys each firing matched, and reports such a
// chain as a *LoopError naming the rules in order. A rule matching its own
// output directly (image "ubuntu*" → "ubuntu:24.04") is not a loop: its
// overrides are constant, so it settles. As a backstop, Apply also fails if
// the map returns to a state an earlier pass ended in, or if it has not
// settled after 2·len(rules)+2 passes. Parse probes each rule's match
// against the whole rule list for every provider, so most loops are caught
// when a mapping is validated, with the line of the rule; Apply catches the
// rest when a template is rendered.
package mapping
