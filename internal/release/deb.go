package release

import (
	"bytes"
	"context"
	"embed"
	"fmt"
	"os"
	"path/filepath"

	"github.com/goreleaser/nfpm/v2"
	"github.com/goreleaser/nfpm/v2/deb"
	"github.com/goreleaser/nfpm/v2/files"

	"github.com/nodemgr/nodemgr/internal/cli"
)

// debian holds the package's systemd units and maintainer scripts.
//
//go:embed debian
var debian embed.FS

// Where the package puts things.
const (
	unitDir        = "/usr/lib/systemd/system"
	serverUnit     = "nodemgr-server.service"
	agentUnit      = "nodemgr-agent.service"
	ServerConfPath = "/etc/nodemgr/server.yaml"
	AgentConfPath  = "/etc/nodemgr/agent.yaml"
)

// BuildDeb packages a built nodemgr binary for target as
// DIR/nodemgr_VERSION_ARCH.deb: the binary, the two systemd units, the
// commented config files (made by cli.ConfigTemplate from the settings
// tables, so they hold every setting at its true default), the shell
// completions, the copyright file and changelog Debian wants, and the
// scripts that add the nodemgr user.
func BuildDeb(ctx context.Context, o Options, a Artifact) (string, error) {
	stage, err := os.MkdirTemp("", "nodemgr-deb-")
	if err != nil {
		return "", fmt.Errorf("release: deb: %w", err)
	}
	defer os.RemoveAll(stage)
	contents, scripts, err := stageDeb(stage, a.Path)
	if err != nil {
		return "", err
	}
	docs, err := stageDocs(ctx, o, stage, a.Path)
	if err != nil {
		return "", err
	}
	contents = append(contents, docs...)
	info := nfpm.WithDefaults(&nfpm.Info{
		Name:          "nodemgr",
		Arch:          a.Target.Arch,
		Platform:      "linux",
		Version:       o.Version,
		VersionSchema: "none", // the version as given: 0.0.0+git.HASH is a fine Debian version
		Section:       "admin",
		Priority:      "optional",
		Maintainer:    o.Maintainer,
		Homepage:      "https://github.com/nodemgr/nodemgr",
		Description: "compute nodes on demand, and the work that runs on them\n" +
			"nodemgr gives a team compute nodes (containers, VMs, cloud instances or\n" +
			"its own machines) and runs work on them through one agent per machine.\n" +
			"This package holds the one static binary and systemd units for the\n" +
			"coordinator (nodemgr-server) and the agent (nodemgr-agent).",
		Overridables: nfpm.Overridables{
			Contents: contents,
			Scripts:  scripts,
			Deb:      nfpm.Deb{Compression: "gzip"},
		},
	})
	if err := nfpm.PrepareForPackager(info, "deb"); err != nil {
		return "", fmt.Errorf("release: deb: %w", err)
	}
	path := filepath.Join(o.OutDir, deb.Default.ConventionalFileName(info))
	var buf bytes.Buffer
	if err := deb.Default.Package(info, &buf); err != nil {
		return "", fmt.Errorf("release: deb: %w", err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		return "", fmt.Errorf("release: deb: %w", err)
	}
	return path, nil
}

// stageDeb writes the generated and embedded files into stage (nfpm
// packages files from disk) and says where each goes.
func stageDeb(stage, binary string) (files.Contents, nfpm.Scripts, error) {
	var contents files.Contents
	add := func(src, dst, typ string, mode os.FileMode) {
		contents = append(contents, &files.Content{Source: src, Destination: dst, Type: typ,
			FileInfo: &files.ContentFileInfo{Mode: mode, Owner: "root", Group: "root"}})
	}
	add(binary, "/usr/bin/nodemgr", files.TypeFile, 0o755)
	write := func(name string, b []byte) (string, error) {
		p := filepath.Join(stage, name)
		return p, os.WriteFile(p, b, 0o644)
	}
	for daemon, dst := range map[string]string{"server": ServerConfPath, "agent": AgentConfPath} {
		b, err := cli.ConfigTemplate(daemon)
		if err != nil {
			return nil, nfpm.Scripts{}, err
		}
		p, err := write(daemon+".yaml", b)
		if err != nil {
			return nil, nfpm.Scripts{}, err
		}
		// The operator's edits survive upgrades; postinst narrows the modes.
		add(p, dst, files.TypeConfigNoReplace, 0o640)
	}
	for shell, dst := range map[string]string{
		"bash": "/usr/share/bash-completion/completions/nodemgr",
		"zsh":  "/usr/share/zsh/vendor-completions/_nodemgr",
		"fish": "/usr/share/fish/vendor_completions.d/nodemgr.fish",
	} {
		var b bytes.Buffer
		if err := cli.CompletionScript(shell, &b); err != nil {
			return nil, nfpm.Scripts{}, err
		}
		p, err := write("completion."+shell, b.Bytes())
		if err != nil {
			return nil, nfpm.Scripts{}, err
		}
		add(p, dst, files.TypeFile, 0o644)
	}
	embedded := func(name string) (string, error) {
		b, err := debian.ReadFile("debian/" + name)
		if err != nil {
			return "", err
		}
		return write(name, b)
	}
	for _, unit := range []string{serverUnit, agentUnit} {
		p, err := embedded(unit)
		if err != nil {
			return nil, nfpm.Scripts{}, err
		}
		add(p, unitDir+"/"+unit, files.TypeFile, 0o644)
	}
	var scripts nfpm.Scripts
	for name, dst := range map[string]*string{"postinst": &scripts.PostInstall, "prerm": &scripts.PreRemove, "postrm": &scripts.PostRemove} {
		p, err := embedded(name)
		if err != nil {
			return nil, nfpm.Scripts{}, err
		}
		*dst = p
	}
	return contents, scripts, nil
}

// stageDocs writes the package's copyright file and changelog into stage.
func stageDocs(ctx context.Context, o Options, stage, binary string) (files.Contents, error) {
	copyright, err := copyrightFile(ctx, o, binary)
	if err != nil {
		return nil, err
	}
	name, changelog, err := changelogFile(o)
	if err != nil {
		return nil, err
	}
	var contents files.Contents
	for file, b := range map[string][]byte{"copyright": copyright, name: changelog} {
		p := filepath.Join(stage, file)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			return nil, fmt.Errorf("release: deb: %w", err)
		}
		contents = append(contents, &files.Content{Source: p, Destination: docDir + "/" + file, Type: files.TypeFile,
			FileInfo: &files.ContentFileInfo{Mode: 0o644, Owner: "root", Group: "root"}})
	}
	return contents, nil
}
