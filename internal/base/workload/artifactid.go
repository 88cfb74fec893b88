package workload

import (
	"fmt"
	"strings"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/base/validate"
)

// ArtifactID names one version of an artifact, written group:artifact:version, as
// in "com.example:search:1.4.2".
type ArtifactID struct {
	Group, Artifact, Version string
}

// Each part becomes one path element under <prefix>/software and one in the
// depot URL, so it must be a plain name: no separators, no "..", and not
// starting with a dot (which also keeps it clear of the store's .tmp).
var artifactPartRE = validate.NewPattern(`^[A-Za-z0-9][A-Za-z0-9._+-]*$`, 128)

// ParseArtifactID parses "group:artifact:version". A malformed id is an
// errdefs.ErrInvalid that names it and the part at fault.
func ParseArtifactID(s string) (ArtifactID, error) {
	parts := strings.Split(s, ":")
	if len(parts) != 3 {
		return ArtifactID{}, fmt.Errorf("artifact id %q: want group:artifact:version: %w", s, errdefs.ErrInvalid)
	}
	id := ArtifactID{Group: parts[0], Artifact: parts[1], Version: parts[2]}
	if err := id.Validate(); err != nil {
		return ArtifactID{}, err
	}
	return id, nil
}

// Validate reports whether each part of id is a plain name.
func (id ArtifactID) Validate() error {
	for _, p := range []struct{ field, value string }{
		{"group", id.Group}, {"artifact", id.Artifact}, {"version", id.Version},
	} {
		if why := CheckArtifactPart(p.value); why != "" {
			return fmt.Errorf("artifact id %q: %s %q %s: %w", id.String(), p.field, p.value, why, errdefs.ErrInvalid)
		}
	}
	return nil
}

// CheckArtifactPart says why s is not a valid part of an artifact ID
// (group, name or version), or "" if it is.
func CheckArtifactPart(s string) string {
	switch {
	case s == "":
		return "is empty"
	case strings.ContainsAny(s, `/\`):
		return "must not contain a slash"
	case strings.Contains(s, ".."):
		return `must not contain ".."`
	case !artifactPartRE.MatchString(s):
		return "must be 1-128 letters, digits and ._+- starting with a letter or digit"
	}
	return ""
}

// String returns "group:artifact:version".
func (id ArtifactID) String() string { return id.Group + ":" + id.Artifact + ":" + id.Version }

// MarshalText writes id as "group:artifact:version".
func (id ArtifactID) MarshalText() ([]byte, error) { return []byte(id.String()), nil }

// UnmarshalText parses "group:artifact:version".
func (id *ArtifactID) UnmarshalText(b []byte) error {
	v, err := ParseArtifactID(string(b))
	if err != nil {
		return err
	}
	*id = v
	return nil
}
