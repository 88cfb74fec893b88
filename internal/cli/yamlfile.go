package cli

import (
	"errors"

	"github.com/nodemgr/nodemgr/internal/base/yamlfield"
)

// maxTaskFile caps a tasks file: thousands of tasks, far more than the
// one megabyte a spec file may be.
const maxTaskFile = 256 << 20

// loadYAML reads a YAML (or JSON) file strictly into v: a bad one is an
// error at FILE:LINE:COL naming the field, with a hint for a mistyped key
// (yamlfield), the same for suites, services and container jobs as for
// templates.
// yamlAs reads path (- for standard input) as a T; see loadYAML.
func yamlAs[T any](path string) (T, error) {
	var v T
	err := loadYAML(path, &v)
	return v, err
}

// readSpec reads the file that -f names with load; missing is the error
// without -f, which says what the file should hold.
func readSpec[T any](file, missing string, load func(path string) (T, error)) (T, error) {
	if file == "" {
		var none T
		return none, errors.New(missing)
	}
	return load(file)
}

func loadYAML(path string, v any) error {
	b, err := readFileOrStdin(path)
	if err != nil {
		return err
	}
	return yamlfield.Unmarshal(b, path, v)
}
