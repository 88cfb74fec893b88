//go:build !linux

package worker

import (
	"context"
	"errors"
	"fmt"
)

func runCommand(ctx context.Context, t Task, env []string) Result {
	return Result{ExitCode: -1, Err: fmt.Errorf("start %s: %w", t.Argv[0], errors.ErrUnsupported)}
}

func ownChildren() {}

func runTasksAs(string) error { return errors.ErrUnsupported }

func closeTrees() error { return nil }
