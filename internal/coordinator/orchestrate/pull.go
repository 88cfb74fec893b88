package orchestrate

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"fmt"
	"os"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
	"golang.org/x/crypto/ssh"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/hw"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
	"github.com/nodemgr/nodemgr/internal/drivers/provision"
)

// Pull bootstrap: a machine that runs cloud-init (EC2 user data, a
// libvirt NoCloud seed) fetches its agent itself, so no SSH is needed
// before its agent runs. Its user data holds a single-use join token, the
// agent's config, the digest of the agent for each architecture the server
// delivers, the server's CA where the server made its own, and the
// machine's SSH host key, made here so that it is known before the machine
// boots. The script fetches GET /v1/agent/binary (AgentBinaryPath) with the
// token, which binds the deployment to the machine id sent along, checks
// the digest and starts the agent: under systemd where the machine has it,
// else under the same restart loop a pushed agent runs under.

// AgentBinaryPath is the server's route a pull-bootstrapped machine
// fetches its agent from: ?arch=(uname -m)&machine_id=ID, authorized by
// the machine's join token.
const AgentBinaryPath = "/v1/agent/binary"

// Header that carries the digest of the agent a fetch returns
// (decompressed), so a script can check it against its own copy too.
const DigestHeader = "X-Nodemgr-Sha256"

// pullFor prepares the pull bootstrap of a machine whose provider gives
// it user data that cloud-init runs; nil for one bootstrapped over its
// executor. Its join token lives for the bootstrap timeout after the
// longest a launch may take.
func (o *Orchestrator) pullFor(ctx context.Context, pr provision.Provider, spec api.PoolSpec, d store.Deployment) (*pullBootstrap, error) {
	ci, ok := pr.(provision.CloudInit)
	if !ok || !ci.PullBootstrap(d.Extra) {
		return nil, nil
	}
	o.mu.Lock()
	cfg := o.cfg.Bootstrap
	o.mu.Unlock()
	arts, err := cfg.Artifacts()
	if err != nil {
		return nil, err
	}
	var ca []byte
	if cfg.ServerCA != "" {
		if ca, err = os.ReadFile(cfg.ServerCA); err != nil {
			return nil, fmt.Errorf("read the server's CA for the machine: %w", err)
		}
	}
	key, err := newHostKey()
	if err != nil {
		return nil, fmt.Errorf("make the machine's host key: %w", err)
	}
	ttl := time.Duration(spec.BootstrapTimeout)
	if ttl == 0 {
		ttl = DefaultBootstrapTimeout
	}
	token, err := o.cluster.JoinToken(ctx, d.ID, spec.Groups, ttl+launchRetryFor+pullLaunchAllowance)
	if err != nil {
		return nil, fmt.Errorf("join token: %w", err)
	}
	user, _ := d.Extra["user"].(string)
	return &pullBootstrap{serverURL: cfg.ServerURL, token: token, serverCA: ca, artifacts: arts,
		config: o.agentConfig(spec, d, token, ca != nil), hostKey: key, user: user}, nil
}

// pullLaunchAllowance is how long a provider may take to make a machine,
// beyond its retries, that its join token allows for.
const pullLaunchAllowance = 10 * time.Minute

// hostKey is an SSH host key made for a machine.
type hostKey struct {
	private string // OpenSSH PEM
	public  string // authorized_keys line
}

func newHostKey() (hostKey, error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return hostKey{}, err
	}
	block, err := ssh.MarshalPrivateKey(priv, "nodemgr pool machine")
	if err != nil {
		return hostKey{}, err
	}
	sp, err := ssh.NewPublicKey(pub)
	if err != nil {
		return hostKey{}, err
	}
	return hostKey{private: string(pem.EncodeToMemory(block)),
		public: strings.TrimSpace(string(ssh.MarshalAuthorizedKey(sp)))}, nil
}

// pullBootstrap is what a machine's user data carries.
type pullBootstrap struct {
	serverURL string
	token     string
	serverCA  []byte // PEM; nil: the system's roots verify the server
	artifacts []Artifact
	config    []byte // agent.yaml
	hostKey   hostKey
	user      string // the template's user: tasks run as it where the image has it
}

// userData is the machine's #cloud-config.
func (p pullBootstrap) userData() (string, error) {
	files := []map[string]any{
		{"path": AgentDir + "/agent.yaml", "permissions": "0600", "content": string(p.config)},
		{"path": AgentDir + "/bootstrap.sh", "permissions": "0700", "content": p.script()},
	}
	if p.serverCA != nil {
		files = append(files, map[string]any{"path": AgentDir + "/server-ca.crt", "permissions": "0644", "content": string(p.serverCA)})
	}
	doc := map[string]any{
		"ssh_keys": map[string]string{
			"ed25519_private": p.hostKey.private,
			"ed25519_public":  p.hostKey.public,
		},
		"write_files": files,
		"runcmd":      [][]string{{"/bin/sh", AgentDir + "/bootstrap.sh"}},
	}
	b, err := yaml.Marshal(doc)
	if err != nil {
		return "", fmt.Errorf("write the machine's user data: %w", err)
	}
	return "#cloud-config\n" + string(b), nil
}

// script fetches, checks and starts the agent. It needs a POSIX shell,
// uname, curl or wget, gzip and sha256sum (busybox has them all).
func (p pullBootstrap) script() string {
	var digests strings.Builder
	for _, a := range p.artifacts {
		fmt.Fprintf(&digests, "  %s) want=%s ;;\n", a.Arch, a.SHA256)
	}
	ca := ""
	if p.serverCA != nil {
		ca = AgentDir + "/server-ca.crt"
	}
	return `#!/bin/sh
# Written by nodemgr's orchestrator: fetches this machine's agent from the
# server, checks its digest and starts it.
set -eu
dir=` + AgentDir + `
server=` + shellQuote(strings.TrimRight(p.serverURL, "/")) + `
ca=` + shellQuote(ca) + `
arch=$(uname -m)
case "$arch" in
` + digests.String() + `  *) echo "nodemgr bootstrap: this machine is $arch and the server has no agent for it; give the server one with --agent-binary" >&2; exit 3 ;;
esac
id=$(sh -c ` + shellQuote(machineIDScript(hw.SystemMachineIDFiles, AgentDataDir)) + ` sh "$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')")
token=` + shellQuote(p.token) + `
url="$server` + AgentBinaryPath + `?arch=$arch&machine_id=$id"
fetch() {
  if command -v curl >/dev/null 2>&1; then
    curl -fsS --retry 30 --retry-delay 2 --retry-connrefused ${ca:+--cacert "$ca"} -H "Authorization: Bearer $token" -o "$1" "$url"
  elif command -v wget >/dev/null 2>&1; then
    wget -q ${ca:+--ca-certificate="$ca"} --header "Authorization: Bearer $token" -O "$1" "$url"
  else
    echo "nodemgr bootstrap: the machine has neither curl nor wget to fetch its agent; use an image with one, or bootstrap: push" >&2
    exit 4
  fi
}
tries=0
until fetch "$dir/nodemgr.gz"; do
  tries=$((tries + 1))
  if [ "$tries" -ge 30 ]; then echo "nodemgr bootstrap: cannot fetch the agent from $server" >&2; exit 5; fi
  sleep 2
done
gzip -dc "$dir/nodemgr.gz" >"$dir/nodemgr.new"
rm -f "$dir/nodemgr.gz"
got=$(sha256sum "$dir/nodemgr.new" | cut -d' ' -f1)
if [ "$got" != "$want" ]; then
  echo "nodemgr bootstrap: the agent fetched from $server has digest $got, not $want: refused; check what sits between this machine and the server" >&2
  exit 6
fi
chmod 0755 "$dir/nodemgr.new"
mv -f "$dir/nodemgr.new" "$dir/nodemgr"
# Tasks that name no run_as run as the template's user, as where the agent
# is pushed through that user's sudo, if cloud-init made it.
user=` + shellQuote(p.user) + `
if [ -n "$user" ] && [ "$user" != root ] && id -u "$user" >/dev/null 2>&1; then
  echo "task_user: '$user'" >>"$dir/agent.yaml"
fi
` + superviseScript + `
`
}

// superviseScript starts $dir/nodemgr's agent with $dir/agent.yaml: as a
// systemd unit where systemd runs, else in the background under a loop
// that restarts it after a crash and ends when it exits 0 (a graceful
// shutdown).
const superviseScript = `chmod 0700 "$dir"
chmod 0600 "$dir/agent.yaml"
# Fail now, with the reason, if the binary cannot run here at all.
"$dir/nodemgr" --version >/dev/null
mkdir -p ` + AgentDataDir + `
if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then
  cat >/etc/systemd/system/nodemgr-agent.service <<EOF
[Unit]
Description=nodemgr agent
After=network-online.target
Wants=network-online.target

[Service]
ExecStart=$dir/nodemgr agent --config $dir/agent.yaml
Restart=on-failure
RestartSec=1
KillMode=process

[Install]
WantedBy=multi-user.target
EOF
  systemctl daemon-reload
  systemctl enable --now nodemgr-agent.service
  exit 0
fi
# No nohup in minimal images: the loop ignores SIGHUP itself, and
# without a terminal there is none to send it anyway.
sh -c 'trap "" HUP; while :; do "$0/nodemgr" agent --config "$0/agent.yaml" && exit 0; echo "nodemgr agent exited $?; restarting in 1s"; sleep 1; done' "$dir" >>"$dir/agent.log" 2>&1 </dev/null &`
