package orchestrate

import (
	"bytes"
	"context"
	"fmt"
	"path"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
	"github.com/nodemgr/nodemgr/internal/drivers/execute"
)

// The agent needs root on its machine: it writes AgentDir and
// AgentDataDir and starts suites' code as other users. The executor runs
// commands as the template's user, which cloud images name (user: ubuntu,
// debian), so bootstrap reaches root through the image's sudo, with -n
// since nobody is there to type a password, and where that fails it
// refuses with what to do rather than leave a half-installed agent.

// login is who the executor runs commands as on a machine.
type login struct {
	root bool
	// user is the user's name, "" where it has none (a bare uid).
	user string
	// stage is a directory of the user's own on the machine, for the
	// agent's files on their way to AgentDir (not root only).
	stage string
	// machineID is the id the machine's agent will register with, read
	// in the same round trip where the login is root (see
	// machineIDScript); "" where it is still to be read through sudo.
	machineID string
}

// loginScript prints the executor's uid and user name; as root it then
// runs the machine id script $1 with its argument $2; for a user other
// than root it checks that sudo -n works and makes the staging dir,
// private to the user (mktemp's 0700). One round trip: each costs a new
// session on SSH, tens of milliseconds on docker exec.
const loginScript = `uid=$(id -u) || exit 1
echo "$uid $(id -un 2>/dev/null)"
if [ "$uid" = 0 ]; then exec /bin/sh -c "$1" sh "$2"; fi
command -v sudo >/dev/null 2>&1 || exit 10
sudo -n true </dev/null || exit 11
mktemp -d "${TMPDIR:-/tmp}/nodemgr-bootstrap.XXXXXX"
`

// checkLogin finds out who the executor runs as on the machine and,
// where that is not root, whether sudo gives it root without a password;
// as root it reads the machine's id too (idScript, machineIDScript's,
// with its argument idArg).
func checkLogin(ctx context.Context, ex execute.Executor, d store.Deployment, idScript, idArg string) (login, error) {
	var out, errOut bytes.Buffer
	code, err := ex.Exec(ctx, d.Machine(), execute.Command{Argv: []string{"/bin/sh", "-c", loginScript, "sh", idScript, idArg},
		Stdout: &out, Stderr: &errOut, Timeout: execTimeout})
	if err != nil {
		return login{}, fmt.Errorf("ask the machine who the executor runs as: %w", err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	uid, name, _ := strings.Cut(lines[0], " ")
	who := name
	if who == "" {
		who = "uid " + uid
	}
	why := strings.TrimSpace(lastBytes(errOut.String(), 300))
	switch {
	case code == 10:
		return login{}, notRoot(who, "the machine has no sudo")
	case code == 11:
		return login{}, notRoot(who, fmt.Sprintf("`sudo -n true` fails (%s)", why))
	case uid == "0":
		id, err := machineIDFrom(code, strings.Join(lines[1:], "\n"), errOut.String())
		if err != nil {
			return login{}, err
		}
		return login{root: true, user: name, machineID: id}, nil
	case code != 0 || uid == "":
		return login{}, fmt.Errorf("ask the machine who the executor runs as: exit %d: %s", code, why)
	}
	if len(lines) != 2 || !path.IsAbs(lines[1]) {
		return login{}, fmt.Errorf("make a staging dir on the machine as %s: mktemp said %q", who, lastBytes(out.String(), 200))
	}
	return login{user: name, stage: lines[1]}, nil
}

// notRoot is the refusal of a login that cannot become root.
func notRoot(who, why string) error {
	return errdefs.Field("user", "the machine's user %s is not root and %s, and the agent needs root: give %s passwordless sudo in the image (a NOPASSWD line in /etc/sudoers.d), or set user: root in the template",
		who, why, who)
}

// asRoot is argv run as root: directly where the executor's user is root,
// else through sudo -n. The machine decides, so that a step that has no
// login at hand (reading the agent's log after a failure) can use it too.
func asRoot(argv ...string) []string {
	return append([]string{"/bin/sh", "-c", `[ "$(id -u)" = 0 ] && exec "$@"; exec sudo -n "$@"`, "sh"}, argv...)
}

// installScript moves the files of the staging dir $1/agent into
// AgentDir as root's, each renamed into place so that none is ever seen
// half-written, and removes the staging dir.
const installScript = `set -e
mkdir -p ` + AgentDir + `
for f in "$1"/agent/*; do
  n=${f##*/}
  cp "$f" "` + AgentDir + `/.$n.new"
  mv -f "` + AgentDir + `/.$n.new" "` + AgentDir + `/$n"
done
rm -rf "$1"
`

// deliver copies the staged tree to AgentDir on the machine: straight
// there as root; as another user into its staging dir, whence root moves
// it, so that the files end up root's.
func deliver(ctx context.Context, ex execute.Executor, d store.Deployment, l login, stage string) error {
	if l.root {
		return ex.CopyTo(ctx, d.Machine(), stage, AgentDir)
	}
	if err := ex.CopyTo(ctx, d.Machine(), stage, l.stage+"/agent"); err != nil {
		return err
	}
	var out bytes.Buffer
	code, err := ex.Exec(ctx, d.Machine(), execute.Command{Argv: asRoot("/bin/sh", "-c", installScript, "sh", l.stage),
		Stdout: &out, Stderr: &out, Timeout: execTimeout})
	if err == nil && code != 0 {
		err = fmt.Errorf("sudo -n install into %s exited %d: %s", AgentDir, code, strings.TrimSpace(lastBytes(out.String(), 300)))
	}
	return err
}

// withTaskUser adds task_user to an agent config for a login: code that
// names no user runs as the template's user, as the template asks, unless
// that is root (the agent then keeps its unprivileged default) or has no
// name. Added to the config's text, so that the config's writer need not
// know of logins.
func (l login) withTaskUser(config []byte) []byte {
	if l.root || l.user == "" {
		return config
	}
	line, _ := yaml.Marshal(map[string]string{"task_user": l.user}) // a map of strings always encodes
	return append(config, line...)
}
