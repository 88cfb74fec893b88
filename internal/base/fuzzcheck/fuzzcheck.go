// Package fuzzcheck holds the comparisons that the fuzz targets of several
// parsers share. Only tests import it.
package fuzzcheck

import (
	"math"

	"github.com/google/go-cmp/cmp"
)

// SameNumber compares numbers by value whatever their Go type: YAML has one
// number, and writes the float 0.0 as 0, which reads back as an int.
var SameNumber = cmp.FilterValues(func(a, b any) bool {
	_, aok := number(a)
	_, bok := number(b)
	return aok && bok
}, cmp.Comparer(func(a, b any) bool {
	x, _ := number(a)
	y, _ := number(b)
	return x == y || (math.IsNaN(x) && math.IsNaN(y))
}))

func number(v any) (float64, bool) {
	switch n := v.(type) {
	case int:
		return float64(n), true
	case int64:
		return float64(n), true
	case uint64:
		return float64(n), true
	case float64:
		return n, true
	}
	return 0, false
}
