package workload_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/base/workload"
)

func TestParseID(t *testing.T) {
	tests := []struct {
		in   string
		want workload.ArtifactID
		err  string // in the error; "" means valid
	}{
		{in: "com.example:search:1.4.2", want: workload.ArtifactID{Group: "com.example", Artifact: "search", Version: "1.4.2"}},
		{in: "g:a-b_c:1.0.0-SNAPSHOT+build.7", want: workload.ArtifactID{Group: "g", Artifact: "a-b_c", Version: "1.0.0-SNAPSHOT+build.7"}},
		{in: "", err: "want group:artifact:version"},
		{in: "a:b", err: "want group:artifact:version"},
		{in: "a:b:c:d", err: "want group:artifact:version"},
		{in: ":b:c", err: `group "" is empty`},
		{in: "a::c", err: `artifact "" is empty`},
		{in: "a:b:", err: `version "" is empty`},
		{in: "a/b:c:d", err: `group "a/b" must not contain a slash`},
		{in: `a:b\c:d`, err: "must not contain a slash"},
		{in: "a:..:c", err: `artifact ".." must not contain ".."`},
		{in: "a:b:1..2", err: `must not contain ".."`},
		{in: "a:b:.hidden", err: `version ".hidden" must be`},
		{in: "a:b:1 2", err: `version "1 2" must be`},
		{in: "a:b:" + strings.Repeat("1", 129), err: "must be 1-128"},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := workload.ParseArtifactID(tc.in)
			if tc.err == "" {
				if err != nil || got != tc.want {
					t.Fatalf("ParseID(%q) = %+v, %v, want %+v", tc.in, got, err, tc.want)
				}
				if got.String() != tc.in {
					t.Errorf("ParseID(%q).String() = %q", tc.in, got.String())
				}
				return
			}
			if !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), fmt.Sprintf("%q", tc.in)) {
				t.Errorf("ParseID(%q) = %v, want ErrInvalid naming the id and saying %q", tc.in, err, tc.err)
			}
		})
	}
}

func TestIDJSON(t *testing.T) {
	id := workload.ArtifactID{Group: "g", Artifact: "a", Version: "1"}
	b, err := json.Marshal(id)
	if err != nil || string(b) != `"g:a:1"` {
		t.Fatalf("json.Marshal(%+v) = %s, %v, want \"g:a:1\"", id, b, err)
	}
	var back workload.ArtifactID
	if err := json.Unmarshal(b, &back); err != nil || back != id {
		t.Errorf("json.Unmarshal(%s) = %+v, %v", b, back, err)
	}
	if err := json.Unmarshal([]byte(`"g:../x:1"`), &back); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("json.Unmarshal of a bad id = %v, want ErrInvalid", err)
	}
}
