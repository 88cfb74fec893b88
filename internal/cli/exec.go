//go:build !agentonly

package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/nodemgr/nodemgr/api"
)

// maxExecStdin is what exec reads of its stdin to pass on; the server
// takes no more.
const maxExecStdin = 16 << 20

// execFailed is exec's exit code when the command could not be run, as
// ssh has it: any other code is the command's own.
const execFailed = 255

func newExecCmd(e *env) *cobra.Command {
	var env []string
	var dir, via string
	var timeout time.Duration
	var noStdin bool
	cmd := &cobra.Command{
		Use:   "exec NODE [--env K=V]... [--workdir DIR] [--timeout 30s] [--via EXECUTOR] -- CMD ARGS...",
		Short: "Run a command on a provisioned machine, streaming its output",
		Long: `Run a command on a provisioned machine (a deployment, by ID or live name).
Its stdout and stderr arrive on this command's stdout and stderr as they are
written, and nodemgr exits with its exit code (128+n when signal n killed
it), or with 255 when it could not be run: an unknown machine, one without
an executor, a program that is not there, a timeout; or with 2, before
anything runs, when the command line is wrong.

Standard input, when it is not a terminal, is read to its end (at most
16 MiB) and given to the command; --no-stdin gives none.

The machine must carry an executor capability: exec:local (local provider),
exec:docker (docker provider) or exec:ssh (machines reached over SSH); see
nodemgr deployment show. The first exec: capability it lists is used;
--via picks another it offers (local, docker, ssh; sftp and rsync run
commands through ssh). Only admins may run commands.

Examples:
  nodemgr exec web-1 -- uname -a
  nodemgr exec web-1 --env DEBUG=1 --workdir /srv --timeout 5m -- ./check.sh
  nodemgr exec vm-1 --via ssh -- systemctl is-active nodemgr
  tar c data | nodemgr exec web-1 -- tar x -C /srv`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			code, err := runExec(cmd, e, args, api.ExecRequest{Env: env, Dir: dir, Via: via}, timeout, noStdin)
			if ue := (*usageError)(nil); errors.As(err, &ue) {
				return err
			}
			if err != nil {
				fmt.Fprintln(e.stderr, "error:", describe(err))
				return &exitError{code: execFailed}
			}
			if code != 0 {
				return &exitError{code: code}
			}
			return nil
		},
	}
	cmd.Flags().StringArrayVar(&env, "env", nil, "KEY=VALUE added to the command's environment (repeatable)")
	cmd.Flags().StringVar(&dir, "workdir", "", "working directory on the machine (default: the machine's)")
	cmd.Flags().DurationVar(&timeout, "timeout", 0, "kill the command after this long (0: no limit)")
	cmd.Flags().BoolVar(&noStdin, "no-stdin", false, "give the command no standard input")
	cmd.Flags().StringVar(&via, "via", "", "executor to run it with: "+executorList()+" (default: the machine's first exec: capability)")
	return cmd
}

func runExec(cmd *cobra.Command, e *env, args []string, req api.ExecRequest, timeout time.Duration, noStdin bool) (int, error) {
	if dash := cmd.ArgsLenAtDash(); len(args) < 2 || (dash != -1 && dash != 1) {
		return -1, usagef("usage: nodemgr exec NODE [flags] -- CMD ARGS... (one machine, then the command after --)")
	}
	for _, kv := range req.Env {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			return -1, usagef("--env %q: want KEY=VALUE", kv)
		}
	}
	if timeout < 0 {
		return -1, usagef("--timeout %s: must not be negative", timeout)
	}
	if timeout > 0 {
		req.Timeout = timeout.String()
	}
	req.Argv = args[1:]
	if !noStdin {
		in, err := readStdin(e.stdin)
		if err != nil {
			return -1, err
		}
		req.Stdin = in
	}
	return clientFor(cmd, e).Exec(cmd.Context(), args[0], req, e.rawOut(), e.rawErr())
}

// readStdin reads what exec passes on: all of r, unless it is a terminal,
// which would wait for a person to type.
func readStdin(r io.Reader) ([]byte, error) {
	if r == nil {
		return nil, nil
	}
	if f, ok := r.(*os.File); ok {
		// A character device is a terminal or /dev/null: nothing to pass.
		if fi, err := f.Stat(); err != nil || fi.Mode()&os.ModeCharDevice != 0 {
			return nil, nil
		}
	}
	b, err := io.ReadAll(io.LimitReader(r, maxExecStdin+1))
	if err != nil {
		return nil, fmt.Errorf("read stdin: %w", err)
	}
	if len(b) > maxExecStdin {
		return nil, fmt.Errorf("stdin is larger than %d MiB: copy the data with nodemgr cp and redirect from the file on the machine, or pass --no-stdin", maxExecStdin>>20)
	}
	return b, nil
}

func newCpCmd(e *env) *cobra.Command {
	var via string
	cmd := &cobra.Command{
		Use:   "cp [--via EXECUTOR] SRC NODE:DST | NODE:SRC DST",
		Short: "Copy files and trees to and from a provisioned machine",
		Long: `Copy a file or a directory tree to or from a provisioned machine (a
deployment, by ID or live name). Exactly one side names the machine, as
NODE:PATH with an absolute PATH; the other is a local path. A local path
that contains ':' must be written with a leading ./ (./a:b), or it is taken
for NODE:PATH.

DST names the copy itself: copying a tree makes, or merges into, the
directory DST. A DST ending in / means into: the copy is DST/NAME, NAME
being SRC's last element (so does a local DST of . or ..). Missing parent
directories are made. Modes, modification times and symbolic links (as
links) are kept; on the machine the copy belongs to its user. Only admins
may copy.

The machine's first copy: capability picks the executor (copy:sftp,
copy:rsync), else its first executor (exec:local, exec:docker and exec:ssh
copy too); --via picks another it offers. rsync sends only what changed.

Examples:
  nodemgr cp ./build web-1:/srv/build       # the tree ./build becomes /srv/build
  nodemgr cp agent.conf web-1:/etc/agent/   # makes /etc/agent/agent.conf
  nodemgr cp web-1:/var/log/app .           # makes ./app
  nodemgr cp --via rsync ./site vm-1:/srv/site`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			srcNode, src, srcRemote := splitNodePath(args[0])
			dstNode, dst, dstRemote := splitNodePath(args[1])
			c := clientFor(cmd, e)
			switch {
			case srcRemote && dstRemote:
				return usagef("both %s and %s name a machine; copy to this one first, then on", args[0], args[1])
			case !srcRemote && !dstRemote:
				return usagef("neither %s nor %s names a machine: write NODE:PATH for the machine's side (a local path that contains ':' starts with ./)", args[0], args[1])
			case srcNode == "" && srcRemote, dstNode == "" && dstRemote:
				return usagef("%s: NODE is empty; write NODE:PATH, or ./PATH for a local path", strings.Join(args, " "))
			case dstRemote:
				return c.CopyToVia(cmd.Context(), dstNode, via, src, dst)
			}
			return c.CopyFromVia(cmd.Context(), srcNode, via, src, dst)
		},
	}
	cmd.Flags().StringVar(&via, "via", "", "executor to copy with: "+executorList()+" (default: the machine's first copy: capability, else its first executor)")
	return cmd
}

// splitNodePath splits NODE:PATH. A path starting with /, ./ or ../, or
// without ':', is local.
func splitNodePath(arg string) (node, path string, remote bool) {
	for _, local := range []string{"/", "./", "../"} {
		if strings.HasPrefix(arg, local) {
			return "", arg, false
		}
	}
	node, path, remote = strings.Cut(arg, ":")
	if !remote {
		return "", arg, false
	}
	return node, path, true
}
