package sqlrow

import (
	"errors"
	"testing"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
)

func TestCheckSchemaVersion(t *testing.T) {
	tests := []struct {
		name           string
		applied, known int64
		want           string // "": no error
	}{
		{name: "new database", applied: 0, known: 21},
		{name: "behind", applied: 20, known: 21},
		{name: "current", applied: 21, known: 21},
		{name: "newer", applied: 23, known: 21,
			want: "the store is at migration 23, this binary knows up to 21; upgrade nodemgr or restore a backup"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckSchemaVersion(tc.applied, tc.known)
			if tc.want == "" {
				if err != nil {
					t.Errorf("CheckSchemaVersion(%d, %d) = %v, want nil", tc.applied, tc.known, err)
				}
				return
			}
			if err == nil || errdefs.Message(err) != tc.want || !errors.Is(err, errdefs.ErrConflict) {
				t.Errorf("CheckSchemaVersion(%d, %d) = %v, want an errdefs.ErrConflict %q", tc.applied, tc.known, err, tc.want)
			}
		})
	}
}
