package release

import (
	"bytes"
	"compress/gzip"
	"context"
	"debug/buildinfo"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// docDir is where Debian wants a package's copyright and changelog.
const docDir = "/usr/share/doc/nodemgr"

// maintainerRE is Debian's Maintainer field: a name and an address.
var maintainerRE = regexp.MustCompile(`^[^<>,]*[^<>,\s][^<>,]* <[^<>@\s]+@[^<>@\s]+\.[^<>@\s]+>$`)

// copyrightFile is /usr/share/doc/nodemgr/copyright in Debian's
// machine-readable format (DEP-5): nodemgr's license, read from the
// license file at the repository's root, and the license of each Go
// module compiled into binary, read from the module's own source.
func copyrightFile(ctx context.Context, o Options, binary string) ([]byte, error) {
	info, err := buildinfo.ReadFile(binary)
	if err != nil {
		return nil, fmt.Errorf("release: copyright: modules of %s: %w", binary, err)
	}
	dirs, err := moduleDirs(ctx, o.RepoDir)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, `Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: nodemgr
Upstream-Contact: %s
Source: https://github.com/nodemgr/nodemgr
Comment: /usr/bin/nodemgr is a static Go binary: it holds nodemgr's own code
 and, compiled in, the Go standard library and the Go modules below. The
 list is the binary's build information (go version -m /usr/bin/nodemgr);
 each module's license was read from the license file in its source at
 that version, where its full text and copyright holders are.
 .
 std (the Go standard library) %s BSD-3-Clause
`, o.Maintainer, info.GoVersion)
	for _, m := range info.Deps {
		if m.Replace != nil {
			m = m.Replace
		}
		license := "unknown (no license file found in the module)"
		if text, _, ok := readLicense(dirs[m.Path+"@"+m.Version]); ok {
			license = licenseName(text)
		}
		fmt.Fprintf(&b, " %s %s %s\n", m.Path, m.Version, license)
	}
	name, text := "NOASSERTION", "nodemgr's source repository holds no license file and names no\nlicense, so this package asserts none. Ask Upstream-Contact for the terms."
	if t, file, ok := readLicense(o.repoDir()); ok {
		name, text = licenseName(t), t
		if strings.HasPrefix(name, "see ") {
			name = "nodemgr-" + file
		}
	}
	fmt.Fprintf(&b, "\nFiles: *\nCopyright: the nodemgr authors\nLicense: %s\n%s", name, indent(text))
	return b.Bytes(), nil
}

// moduleDirs maps each module of the build list (path@version) to where
// the go tool keeps its source; modules not downloaded are left out.
func moduleDirs(ctx context.Context, repoDir string) (map[string]string, error) {
	cmd := exec.CommandContext(ctx, "go", "list", "-m", "-json", "all")
	cmd.Dir = repoDir
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			err = fmt.Errorf("%w: %s", err, ee.Stderr)
		}
		return nil, fmt.Errorf("release: copyright: go list -m all: %w", err)
	}
	type module struct {
		Path, Version, Dir string
		Replace            *module
	}
	dirs := map[string]string{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var m module
		if err := dec.Decode(&m); err == io.EOF {
			break
		} else if err != nil {
			return nil, fmt.Errorf("release: copyright: go list -m all: %w", err)
		}
		if m.Replace != nil {
			m = *m.Replace
		}
		if m.Dir != "" {
			dirs[m.Path+"@"+m.Version] = m.Dir
		}
	}
	return dirs, nil
}

// readLicense is the text of the license file in dir (LICENSE, COPYING
// and their variants) and its name.
func readLicense(dir string) (text, name string, ok bool) {
	if dir == "" {
		return "", "", false
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", "", false
	}
	for _, e := range entries {
		n := strings.ToLower(e.Name())
		if e.Type().IsRegular() && (strings.HasPrefix(n, "licen") || strings.HasPrefix(n, "copying")) {
			if b, err := os.ReadFile(filepath.Join(dir, e.Name())); err == nil {
				return string(b), e.Name(), true
			}
		}
	}
	return "", "", false
}

// licenseName is the SPDX name of the license text, for the licenses Go
// modules commonly carry.
func licenseName(text string) string {
	t := strings.Join(strings.Fields(text), " ")
	has := func(s ...string) bool {
		for _, x := range s {
			if !strings.Contains(t, x) {
				return false
			}
		}
		return true
	}
	switch {
	case has("Apache License", "Version 2.0"):
		return "Apache-2.0"
	case has("Mozilla Public License Version 2.0"), has("Mozilla Public License, version 2.0"):
		return "MPL-2.0"
	case has("Permission is hereby granted, free of charge"):
		return "MIT"
	case has("Redistribution and use in source and binary forms", "Neither the name"),
		has("Redistribution and use in source and binary forms", "names of its contributors"):
		return "BSD-3-Clause"
	case has("Redistribution and use in source and binary forms"):
		return "BSD-2-Clause"
	case has("Permission to use, copy, modify, and/or distribute this software for any purpose"),
		has("Permission to use, copy, modify, and distribute this software for any purpose"):
		return "ISC"
	case has("GNU LESSER GENERAL PUBLIC LICENSE"):
		return "LGPL"
	case has("GNU GENERAL PUBLIC LICENSE"):
		return "GPL"
	case has("This is free and unencumbered software released into the public domain"):
		return "Unlicense"
	}
	return "see the license file in the module"
}

// indent makes text a DEP-5 field's continuation lines.
func indent(text string) string {
	var b strings.Builder
	for _, line := range strings.Split(strings.TrimRight(text, "\n"), "\n") {
		if strings.TrimSpace(line) == "" {
			line = "."
		}
		b.WriteString(" " + line + "\n")
	}
	return b.String()
}

// changelogFile is the package's Debian changelog, one entry for this
// version, gzipped as Debian wants (best compression, no name or time in
// the header, so the same release gives the same bytes). Its name is
// changelog.gz for a native version (no Debian revision) and
// changelog.Debian.gz otherwise.
func changelogFile(o Options) (name string, gz []byte, err error) {
	date := o.Date
	if date.IsZero() {
		date = time.Now()
	}
	commit := o.Commit
	if commit == "" {
		commit = "unknown"
	}
	text := fmt.Sprintf("nodemgr (%s) unstable; urgency=medium\n\n  * Release %s, built from commit %s.\n\n -- %s  %s\n",
		o.Version, o.Version, commit, o.Maintainer, date.UTC().Format(time.RFC1123Z))
	var b bytes.Buffer
	w, err := gzip.NewWriterLevel(&b, gzip.BestCompression)
	if err != nil {
		return "", nil, err
	}
	w.Write([]byte(text))
	if err := w.Close(); err != nil {
		return "", nil, fmt.Errorf("release: changelog: %w", err)
	}
	name = "changelog.gz"
	if strings.Contains(o.Version, "-") {
		name = "changelog.Debian.gz"
	}
	return name, b.Bytes(), nil
}
