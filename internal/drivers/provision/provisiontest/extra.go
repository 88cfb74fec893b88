package provisiontest

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// CheckParsed checks a driver's parser of a rendered Extra (its
// parseExtra) on one table case: parse(extra) must succeed and give want,
// as go-cmp compares them with opts (cmp.AllowUnexported for the driver's
// own config type).
func CheckParsed[C any](t *testing.T, parse func(map[string]any) (C, error), extra map[string]any, want C, opts ...cmp.Option) {
	t.Helper()
	got, err := parse(extra)
	if err != nil {
		t.Fatalf("parseExtra(%v) = %v", extra, err)
	}
	if diff := cmp.Diff(want, got, opts...); diff != "" {
		t.Errorf("parseExtra(%v) (-want +got):\n%s", extra, diff)
	}
}
