package httpapi

import (
	"errors"
	"testing"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
)

func TestDecodeStrictNamesEmptyKey(t *testing.T) {
	tests := []struct {
		body, wantField string
	}{
		{`{"":1}`, `""`},
		{`{"reports":[{"":1}]}`, `reports[0].""`},
	}
	for _, tc := range tests {
		var r api.TasksReport
		err := DecodeStrict([]byte(tc.body), &r)
		var fe *errdefs.FieldError
		if !errors.As(err, &fe) || fe.Field != tc.wantField {
			t.Errorf("DecodeStrict(%q) = %v, want an error naming field %s", tc.body, err, tc.wantField)
		}
	}
}
