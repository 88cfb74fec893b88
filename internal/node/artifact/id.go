package artifact

import "github.com/nodemgr/nodemgr/internal/base/workload"

// ID names one version of an artifact, group:artifact:version. Its form is
// checked in workload, where the server checks service specs too.
type ID = workload.ArtifactID

// ParseID parses "group:artifact:version"; see workload.ParseArtifactID.
func ParseID(s string) (ID, error) { return workload.ParseArtifactID(s) }
