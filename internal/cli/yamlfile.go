package cli

import "github.com/nodemgr/nodemgr/internal/base/yamlfield"

// maxTaskFile caps a tasks file: thousands of tasks, far more than the
// one megabyte a spec file may be.
const maxTaskFile = 256 << 20

// loadYAML reads a YAML (or JSON) file strictly into v: a bad one is an
// error at FILE:LINE:COL naming the field, with a hint for a mistyped key
// (yamlfield), the same for suites, services and container jobs as for
// templates.
func loadYAML(path string, v any) error {
	b, err := readFileOrStdin(path)
	if err != nil {
		return err
	}
	return yamlfield.Unmarshal(b, path, v)
}
