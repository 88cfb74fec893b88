package ec2test

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
	"go.yaml.in/yaml/v3"
)

// Machines runs the fake's instances: each instance launched is a
// container of an image on the host's network, whose user data runs as
// cloud-init would run it at first boot (CloudInitScript), and which is
// removed when its instance starts to end. So a test drives the whole
// path of an EC2 machine (launch, user data, the agent fetched, work run,
// termination) where moto only records the calls.
type Machines struct {
	eng    *client.Client
	image  string
	labels map[string]string
	hosts  []string // host:IP lines for the containers' /etc/hosts

	mu         sync.Mutex
	containers map[string]string // instance ID → container ID
	errs       []error
}

// RunMachines makes every instance s launches from now on a container of
// image, labelled with labels (give the labels of dockertest.Labels, so
// that what a failing test leaves is removed), with hosts (name → IP)
// in its /etc/hosts.
func (s *Server) RunMachines(eng *client.Client, image string, labels, hosts map[string]string) *Machines {
	m := &Machines{eng: eng, image: image, labels: labels, containers: map[string]string{}}
	for name, ip := range hosts {
		m.hosts = append(m.hosts, name+":"+ip)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.onLaunch, s.onEnd = m.start, m.stop
	return m
}

// Container is the container of an instance; "" if it has none (not
// launched, not started, or removed).
func (m *Machines) Container(instanceID string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.containers[instanceID]
}

// Err says what went wrong starting or removing containers.
func (m *Machines) Err() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return errors.Join(m.errs...)
}

func (m *Machines) fail(err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.errs = append(m.errs, err)
}

// start runs an instance's container: cloud-init's work, then a sleep
// that keeps the machine up.
func (m *Machines) start(inst Instance) {
	script, err := CloudInitScript(inst.UserData)
	if err != nil {
		m.fail(fmt.Errorf("instance %s: %w", inst.ID, err))
		script = "echo " + shellQuote(err.Error()) + " >&2"
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	labels := map[string]string{"ec2test.instance": inst.ID}
	for k, v := range m.labels {
		labels[k] = v
	}
	res, err := m.eng.ContainerCreate(ctx, client.ContainerCreateOptions{
		Name: "ec2test-" + inst.ID,
		Config: &container.Config{Image: m.image, Labels: labels, Hostname: inst.ID,
			Cmd: []string{"/bin/sh", "-c", "mkdir -p /var/log; (" + script + ") >>/var/log/cloud-init-output.log 2>&1; exec sleep 2147483647"}},
		HostConfig: &container.HostConfig{NetworkMode: "host", ExtraHosts: m.hosts},
	})
	if err != nil {
		m.fail(fmt.Errorf("instance %s: create its container: %w", inst.ID, err))
		return
	}
	m.mu.Lock()
	m.containers[inst.ID] = res.ID
	m.mu.Unlock()
	if _, err := m.eng.ContainerStart(ctx, res.ID, client.ContainerStartOptions{}); err != nil {
		m.fail(fmt.Errorf("instance %s: start its container: %w", inst.ID, err))
	}
}

// stop removes an instance's container, as the instance powers off.
func (m *Machines) stop(inst Instance) {
	m.mu.Lock()
	id := m.containers[inst.ID]
	m.mu.Unlock()
	if id == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := m.eng.ContainerRemove(ctx, id, client.ContainerRemoveOptions{Force: true}); err != nil {
		m.fail(fmt.Errorf("instance %s: remove its container: %w", inst.ID, err))
	}
	// Forgotten once gone, so that Container says when it is.
	m.mu.Lock()
	delete(m.containers, inst.ID)
	m.mu.Unlock()
}

// CloudInitScript turns user data into the shell script that does what
// cloud-init does with it at first boot, for the parts nodemgr and its
// tests use: a script (#!) is run; a #cloud-config has its ssh_keys
// written as the host's keys, its write_files written (content as is or
// base64, with their permissions), then its runcmd run in order. Other
// cloud-config keys are refused, so that a test cannot pass on user data
// this fake only pretends to run.
func CloudInitScript(userData string) (string, error) {
	switch {
	case userData == "":
		return "true", nil
	case strings.HasPrefix(userData, "#!"):
		return writeFile("/var/lib/cloud/instance/scripts/part-001", userData, "0700") +
			"\n/var/lib/cloud/instance/scripts/part-001", nil
	case !strings.HasPrefix(userData, "#cloud-config"):
		return "", fmt.Errorf("user data is neither a script (#!) nor #cloud-config: %.40q", userData)
	}
	var cc struct {
		SSHKeys    map[string]string `yaml:"ssh_keys"`
		WriteFiles []struct {
			Path        string `yaml:"path"`
			Content     string `yaml:"content"`
			Permissions string `yaml:"permissions"`
			Encoding    string `yaml:"encoding"`
		} `yaml:"write_files"`
		RunCmd []any `yaml:"runcmd"`
	}
	var raw map[string]any
	if err := yaml.Unmarshal([]byte(userData), &raw); err != nil {
		return "", fmt.Errorf("cloud-config: %w", err)
	}
	for k := range raw {
		if k != "ssh_keys" && k != "write_files" && k != "runcmd" {
			return "", fmt.Errorf("cloud-config key %q is not one this fake runs", k)
		}
	}
	if err := yaml.Unmarshal([]byte(userData), &cc); err != nil {
		return "", fmt.Errorf("cloud-config: %w", err)
	}
	var b strings.Builder
	b.WriteString("set -e\n")
	for name, key := range cc.SSHKeys {
		kind, part, ok := strings.Cut(name, "_")
		if !ok || (part != "private" && part != "public") {
			return "", fmt.Errorf("cloud-config ssh_keys: %q is not TYPE_private or TYPE_public", name)
		}
		file, mode := "/etc/ssh/ssh_host_"+kind+"_key", "0600"
		if part == "public" {
			file, mode = file+".pub", "0644"
		}
		b.WriteString(writeFile(file, key, mode))
	}
	for _, f := range cc.WriteFiles {
		content := f.Content
		switch f.Encoding {
		case "":
		case "b64", "base64":
			dec, err := base64.StdEncoding.DecodeString(content)
			if err != nil {
				return "", fmt.Errorf("cloud-config write_files %s: %w", f.Path, err)
			}
			content = string(dec)
		default:
			return "", fmt.Errorf("cloud-config write_files %s: encoding %q is not one this fake runs", f.Path, f.Encoding)
		}
		mode := f.Permissions
		if mode == "" {
			mode = "0644"
		}
		b.WriteString(writeFile(f.Path, content, mode))
	}
	for i, c := range cc.RunCmd {
		switch c := c.(type) {
		case string:
			b.WriteString("sh -c " + shellQuote(c) + "\n")
		case []any:
			for _, a := range c {
				b.WriteString(shellQuote(fmt.Sprint(a)) + " ")
			}
			b.WriteString("\n")
		default:
			return "", fmt.Errorf("cloud-config runcmd[%d]: want a string or a list", i)
		}
	}
	return b.String(), nil
}

// writeFile is the shell that writes content to file with mode.
func writeFile(file, content, mode string) string {
	return fmt.Sprintf("mkdir -p %s\necho %s | base64 -d >%s\nchmod %s %s\n", shellQuote(path.Dir(file)),
		base64.StdEncoding.EncodeToString([]byte(content)), shellQuote(file), mode, shellQuote(file))
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
