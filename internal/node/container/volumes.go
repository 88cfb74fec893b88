package container

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/moby/moby/api/types/mount"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/base/workload"
)

// jobRuntimeDir is the job's directory on the node: relative volume
// sources are in it, and absolute ones must be.
func (m *Manager) jobRuntimeDir(id string) string {
	return filepath.Join(m.runtimeDir, id)
}

// mounts turns a valid job's volumes into the engine's mounts, making the
// directories of path volumes. A host path outside the job's runtime dir
// is a field error: a job must not reach the node's files.
func (m *Manager) mounts(job api.ContainerJob) ([]mount.Mount, error) {
	var out []mount.Mount
	for i, v := range job.Volumes {
		if !workload.IsVolumePath(v.Source) {
			out = append(out, mount.Mount{Type: mount.TypeVolume, Source: v.Source, Target: v.Target, ReadOnly: v.ReadOnly})
			continue
		}
		field := fmt.Sprintf("volumes[%d].source", i)
		if m.runtimeDir == "" {
			return nil, errdefs.Field(field, "this node has no runtime dir for containers: use a named volume")
		}
		dir := m.jobRuntimeDir(job.ID)
		src := v.Source
		if !filepath.IsAbs(src) {
			src = filepath.Join(dir, src)
		}
		src = filepath.Clean(src)
		if src != dir && !strings.HasPrefix(src, dir+string(filepath.Separator)) {
			return nil, errdefs.Field(field, "%q is outside the job's runtime dir %s: host paths are refused; use a path inside it (e.g. ./data) or a named volume", v.Source, dir)
		}
		out = append(out, mount.Mount{Type: mount.TypeBind, Source: src, Target: v.Target, ReadOnly: v.ReadOnly})
	}
	return out, nil
}

// makeBindDirs makes the directories path volumes mount, inside the job's
// runtime dir. Links are not followed out of it: a job's own files must
// not point its mounts elsewhere.
func (m *Manager) makeBindDirs(id string, mounts []mount.Mount) error {
	dir := m.jobRuntimeDir(id)
	for _, mt := range mounts {
		if mt.Type != mount.TypeBind {
			continue
		}
		if err := os.MkdirAll(mt.Source, 0o755); err != nil {
			return fmt.Errorf("make volume dir: %w", err)
		}
		real, err := filepath.EvalSymlinks(mt.Source)
		if err != nil {
			return fmt.Errorf("make volume dir: %w", err)
		}
		realDir, err := filepath.EvalSymlinks(dir)
		if err != nil {
			return fmt.Errorf("make volume dir: %w", err)
		}
		if real != realDir && !strings.HasPrefix(real, realDir+string(filepath.Separator)) {
			return errdefs.Field("volumes", "%s leads outside the job's runtime dir (a link); remove the link", mt.Source)
		}
	}
	return nil
}
