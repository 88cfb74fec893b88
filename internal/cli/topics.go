package cli

import (
	"fmt"
	"sort"
	"strings"

	"github.com/spf13/cobra"

	"github.com/nodemgr/nodemgr/internal/base/yamlfield"
)

// helpTopic is a page of `nodemgr help TOPIC`: a concept that spans
// several commands, told in one place. docs/*.md have the long form.
type helpTopic struct{ short, text string }

// helpTopics are the concepts with a page of their own.
var helpTopics = map[string]helpTopic{
	"templates": {"what a machine is, independent of providers; mappings", `Templates: what a machine is, independent of providers

A template names a machine's image, user and size, and per-provider
overrides. It is rendered for one provider into a flat map (Extra): the
template's fields, then overrides.all, then overrides.<provider>; then every
mapping rule whose match keys all match is applied on top.

  # web.yaml
  name: web
  image: ubuntu:24.04
  user: ubuntu
  cpu: 1
  memoryMB: 256
  diskMB: 4096
  overrides:
    all:    {hostname: web}
    docker: {network_mode: host}

  # images.yaml: a mapping; match_type exact (default) or glob
  mapping:
    - match: {image: "ubuntu:*", match_type: glob}
      overrides:
        docker: {image: "registry.example/ubuntu:24.04"}

  nodemgr template validate -f web.yaml
  nodemgr template apply -f web.yaml
  nodemgr mapping apply -f images.yaml
  nodemgr template render web --provider docker --explain   # the Extra map and why
  nodemgr provision --template web --provider docker --count 2

Files are read strictly: an unknown key is an error at FILE:LINE:COL with
"did you mean". Each provider declares the keys it reads, so a key in
overrides.<provider> that it does not read is refused; overrides.all may
hold any key. Pools and the scheduler name templates too (nodemgr help pools).

See also: nodemgr template --help, nodemgr mapping --help,
docs/provisioning.md.
`},
	"suites": {"campaigns of tasks run by pools of pinned workers", `Suites: campaigns of tasks with one environment

A suite is a queue of tasks that agents take up as a whole: an agent whose
tags cover the suite's (and whose groups admit its group), or one it is
assigned to, runs the prepare hook once, starts worker_count pinned worker
processes that take the suite's tasks, and runs the cleanup hook once.

  # suite.yaml
  name: render
  group: ml-team            # agents in this group may run it
  tags: [linux]             # agents need all of these
  priority: 10              # higher suites go first
  worker_schedule:
    worker_count: 4         # 1..256 per agent; 0 or absent: one per CPU
    cpu_binding: {cores: [0, 1, 2, 3], strategy: Exclusive}   # RoundRobin | Exclusive | Shared
    task_prefetch_count: 32
  hooks:
    prepare: {command: [sh, -c, "tar xf data.tar"], timeout: 10m}
    cleanup: {command: [rm, -rf, data]}
  run_as: builder           # absent: an unprivileged user (nodemgr-task, else nobody)

  nodemgr suite create -f suite.yaml
  nodemgr task submit --suite render --timeout 5m -- ./render --frame 1
  nodemgr task submit --suite render -f tasks.jsonl   # one JSON task per line
  nodemgr suite close render        # no more tasks: Complete when the last ends
  nodemgr suite watch render
  nodemgr suite show render         # why it waits, each node's last problem
  nodemgr task show TASK            # attempts, exit code or signal, output tails

States: Open -> Closed (by suite close, or no new task for
--suite-close-after, 180s) -> Complete; or Cancelled. A task is Pending
(waiting for its "after" tasks), Ready, Running, then Finished, Failed or
Cancelled. A task is given up after 2 crashes by SIGSEGV, SIGILL, SIGBUS or
SIGFPE, or 3 failures by SIGKILL, SIGABRT, a non-zero exit or a timeout;
signals nodemgr sent itself never count. Tasks may carry input files, output
globs and dependencies (docs/suites.md, "Remote make").

Hooks and tasks never run as the agent's user unless the suite says so: an
agent run as root starts them as run_as, by default an unprivileged user it
keeps for this (nodemgr-task, made with useradd when missing, else nobody),
which cannot read the agent's data dir or change the inputs' cache. run_as
root or agent (the agent's own rights) is for an admin of the suite's group.
An agent not run as root runs them as itself and refuses another run_as.

See also: nodemgr suite --help, nodemgr task --help, nodemgr help pools.
`},
	"pools": {"machines made and destroyed as work asks", `Pools: nodes on demand

A pool keeps machines sized to the work waiting for them. When suites its
agents may run have Ready tasks and no node to run them (or an ensemble fits
nowhere), it makes machines from a template on a provider, delivers a static
nodemgr agent onto each through the provider's executor, and destroys them
once they have been idle for idle_timeout.

  # pool.yaml
  name: ci
  template: worker          # or candidates: [{template, provider, price}] with a policy
  provider: docker
  tags: [linux]             # given to its agents; suites needing them are its demand
  min: 0
  max: 4
  idle_timeout: 5m
  bootstrap_timeout: 3m     # the agent must register within this
  max_launching: 2

  nodemgr pool apply -f pool.yaml
  nodemgr pool ls                   # DESIRED, MACHINES, WAITING (why not more)
  nodemgr pool show ci              # the demand it answers, its machines
  nodemgr pool events ci -f         # every decision with its reason
  nodemgr schedule explain --cpus 2 --tag linux --policy cheapest
  nodemgr pool rm ci                # drained, then destroyed

Machine states: requested -> provisioning -> bootstrapping -> ready ->
draining -> terminating -> gone, or failed (its candidate backs off,
--pool-backoff, doubling up to 5m, and the next candidate serves). A
provider call that fails during a launch is tried 3 times (2s, then 4s
apart: --pool-launch-tries, --pool-launch-retry); a refusal for want of capacity moves to the next candidate at
once. Intents are stored before provider calls
and resources carry owner labels, so a server crash leaks no machine.

The agent delivered is --agent-binary FILE, or from --agent-binaries DIR
(nodemgr-linux-amd64, nodemgr-linux-arm64, as go run ./cmd/release builds
them) by the machine's uname -m, else the server's own binary if static.
The server must be reachable from the machines: --agent-server-url.
AWS machines and libvirt machines booted from a cloud image fetch the
agent themselves through cloud-init (pull: GET /v1/agent/binary with their
single-use token, digest checked, no SSH needed; their SSH host key is made
by the server and pinned); others are pushed over docker exec or SSH, which
is awaited within bootstrap_timeout. A template with user_data of its own,
or bootstrap: push in its overrides, is pushed. The agent travels stripped,
and gzip-compressed where it crosses a network.
The agent runs as root. Where it is pushed (docker exec, or SSH with
bootstrap: push) as a template user that is not root (cloud images say
user: debian or ubuntu), that user needs passwordless sudo, through which
the agent is installed and started (else the machine fails saying so), and
suites that name no run_as run there as that user.

A libvirt template names a guest image on the libvirt host: take a cloud
image, which runs cloud-init. The provider makes its storage pool
(--libvirt-pool, "default", in /var/lib/libvirt/images) when the daemon
has none, and finds an image put there by its file name:

  sudo wget -P /var/lib/libvirt/images \
    https://cloud.debian.org/images/cloud/bookworm/latest/debian-12-genericcloud-amd64.qcow2

  # debian-vm.yaml
  name: debian-vm
  user: debian              # made by cloud-init, with passwordless sudo
  cpu: 2
  memoryMB: 2048
  diskMB: 10240
  overrides:
    libvirt:
      base_image: debian-12-genericcloud-amd64.qcow2
      ssh_authorized_keys: ["ssh-ed25519 AAAA... you@host"]

For Ubuntu take noble-server-cloudimg-amd64.img from
https://cloud-images.ubuntu.com/noble/current/ with user: ubuntu. The
server's ssh executor logs in with the key's private half
(--ssh-identity-file) and must accept the new machine's host key
(--ssh-accept-new-host-keys).

See also: nodemgr pool --help, nodemgr help templates, docs/pools.md.
`},
	"ensembles": {"containers and services across nodes, as one", `Ensembles: containers and services across nodes, as one

An ensemble is one manifest of allocations, each a container job or a
service from an artifact, with a replica count, the resources each replica
books, and placement constraints. It is placed on nodes by their books,
committed all or nothing, and has one status, logs and shutdown.

  # shop.yaml
  name: shop
  policy: binpack                  # or spread
  allocations:
    - name: db
      resources: {cpus: 0.5, memory_mb: 512}
      placement: {tags: [ssd]}     # also nodes: [...], groups: [...]
      container: {image: postgres:16, ports: [{container: 5432}]}
    - name: web
      count: 3
      resources: {cpus: 0.25, memory_mb: 128}
      placement: {spread: true}    # no two replicas on one node
      container: {image: shop-web:1, ports: [{container: 8080}]}

  nodemgr ensemble deploy -f shop.yaml --dry-run   # which node takes each replica, and why
  nodemgr ensemble deploy -f shop.yaml --wait
  nodemgr ensemble ls
  nodemgr ensemble show shop
  nodemgr ensemble logs shop web
  nodemgr ensemble shutdown shop

Each replica is committed in its node's books before anything starts; if one
fails, all are removed. Later allocations learn where earlier ones answer
(NODEMGR_ALLOC_DB_ADDR, _HOST, _PORT). One that fits nowhere waits for pools
to make machines, up to provision_deadline (--ensemble-provision-deadline,
10m). Status is running, degraded (with the reason), failed or shut down; a
node offline past restore_deadline (--ensemble-restore-deadline, 5m) has its
replicas placed again elsewhere.

See also: nodemgr ensemble --help, nodemgr node resources --help,
docs/ensembles.md.
`},
}

// topicNames are the topics, sorted.
func topicNames() []string {
	names := make([]string, 0, len(helpTopics))
	for n := range helpTopics {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// newHelpCmd is `nodemgr help [COMMAND... | TOPIC]`: cobra's help command
// plus the topics, refusing what is neither (cobra's prints the root's
// help and succeeds).
func newHelpCmd(root *cobra.Command) *cobra.Command {
	return &cobra.Command{
		Use:   "help [COMMAND... | TOPIC]",
		Short: "Help about any command, or a topic: " + strings.Join(topicNames(), ", "),
		ValidArgsFunction: func(_ *cobra.Command, args []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
			if len(args) > 0 {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			var out []cobra.Completion
			for _, n := range topicNames() {
				out = append(out, cobra.CompletionWithDesc(n, helpTopics[n].short))
			}
			for _, c := range root.Commands() {
				if c.IsAvailableCommand() {
					out = append(out, cobra.CompletionWithDesc(c.Name(), c.Short))
				}
			}
			return out, cobra.ShellCompDirectiveNoFileComp
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				if t, ok := helpTopics[args[0]]; ok {
					fmt.Fprint(cmd.OutOrStdout(), t.text)
					return nil
				}
			}
			target, rest, err := root.Find(args)
			if err != nil || len(rest) > 0 || (target == root && len(args) > 0) {
				return unknownTopic(root, args)
			}
			return target.Help()
		},
	}
}

// unknownTopic says what help does know, with a suggestion.
func unknownTopic(root *cobra.Command, args []string) error {
	word := args[len(args)-1]
	msg := fmt.Sprintf("no help topic or command %q", strings.Join(args, " "))
	if t := yamlfield.Suggest(word, topicNames()); t != "" {
		msg += "; did you mean " + t + "?"
	} else if s := root.SuggestionsFor(word); len(s) > 0 {
		msg += "; did you mean " + strings.Join(s, " or ") + "?"
	}
	return &usageError{fmt.Errorf("%s (topics: %s; or any command, see nodemgr --help)", msg, strings.Join(topicNames(), ", "))}
}
