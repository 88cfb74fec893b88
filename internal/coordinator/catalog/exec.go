package catalog

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/drivers/execute"
	"github.com/nodemgr/nodemgr/internal/drivers/provision"
)

// MaxExecStdin caps what an exec hands its command on stdin; more belongs
// in a file copied to the node.
const MaxExecStdin = 16 << 20

// CheckExec checks an exec request field by field and returns its command,
// without its output streams.
func CheckExec(req api.ExecRequest) (execute.Command, error) {
	if len(req.Argv) == 0 {
		return execute.Command{}, errdefs.Field("argv", "required: the command and its arguments")
	}
	if req.Argv[0] == "" {
		return execute.Command{}, errdefs.Field("argv[0]", "empty; name the program to run")
	}
	for i, kv := range req.Env {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			return execute.Command{}, errdefs.Field(fmt.Sprintf("env[%d]", i), "%q is not KEY=VALUE", kv)
		}
	}
	var timeout time.Duration
	if req.Timeout != "" {
		t, err := time.ParseDuration(req.Timeout)
		if err != nil || t <= 0 {
			return execute.Command{}, errdefs.Field("timeout", "%q is not a positive Go duration (30s, 5m)", req.Timeout)
		}
		timeout = t
	}
	if len(req.Stdin) > MaxExecStdin {
		return execute.Command{}, errdefs.Field("stdin", "larger than %d MiB; copy the data to the node with nodemgr cp and redirect from the file", MaxExecStdin>>20)
	}
	if err := CheckVia(req.Via); err != nil {
		return execute.Command{}, err
	}
	cmd := execute.Command{Argv: req.Argv, Env: req.Env, Dir: req.Dir, Timeout: timeout}
	if len(req.Stdin) > 0 {
		cmd.Stdin = bytes.NewReader(req.Stdin)
	}
	return cmd, nil
}

// CheckVia checks the executor a request names, if any.
func CheckVia(via string) error {
	if via == "" {
		return nil
	}
	_, err := execute.Lookup("via", via)
	return err
}

// CheckNodePath checks the path a copy names: an absolute path on the node.
func CheckNodePath(p string) error {
	if p == "" {
		return errdefs.Field("path", "required: an absolute path on the node")
	}
	if !path.IsAbs(p) {
		return errdefs.Field("path", "%q is not absolute; give the full path on the node", p)
	}
	if len(p) > 4096 {
		return errdefs.TooLarge("path", "longer than 4096 bytes")
	}
	if i := strings.IndexFunc(p, func(r rune) bool { return r < 0x20 || r == 0x7f }); i >= 0 {
		return errdefs.Field("path", "has a control character (%q) at byte %d; no file name on the node has one", p[i], i)
	}
	return nil
}

// RunExec runs cmd on d through e, its output to stdout and stderr, and
// returns the event that ends an exec: the exit code, or what went wrong.
func (c *Catalog) RunExec(ctx context.Context, d provision.Deployment, e execute.Executor, cmd execute.Command, stdout, stderr io.Writer) api.ExecEvent {
	cmd.Stdout, cmd.Stderr = stdout, stderr
	code, err := e.Exec(ctx, d, cmd)
	switch {
	case err == nil:
		return api.ExecEvent{Exit: &code}
	case errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
		return api.ExecEvent{Error: err.Error(), Code: api.CodeTimeout}
	}
	if errdefs.Code(err) == "internal" && ctx.Err() == nil {
		c.log.Error("exec failed", "deployment", d.ID, "name", d.Name, "argv0", cmd.Argv[0], "err", err)
	}
	return api.ExecEvent{Error: errdefs.Message(err), Code: errdefs.Code(err)}
}
