package dockerexec

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/nodemgr/nodemgr/internal/base/dockerengine"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
)

// owner resolves the container's configured user[:group] to the numeric
// IDs its processes run as, reading the container's own /etc/passwd and
// /etc/group for names, as the runtime does.
func (e *Docker) owner(ctx context.Context, id string) (uid, gid int, err error) {
	res, err := e.engine.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
	if err != nil {
		return 0, 0, fmt.Errorf("inspect container: %w", dockerengine.Classify(err))
	}
	spec := ""
	if res.Container.Config != nil {
		spec = res.Container.Config.User
	}
	user, group, hasGroup := strings.Cut(spec, ":")
	if user == "" {
		user = "0"
	}

	var passwd [][]string // name:x:uid:gid:...
	if n, err := strconv.Atoi(user); err == nil {
		uid = n
		// The primary group, if the user is listed.
		if passwd, err = e.readDB(ctx, id, "/etc/passwd"); err != nil {
			return 0, 0, err
		}
		for _, f := range passwd {
			if len(f) > 3 && f[2] == user {
				gid, _ = strconv.Atoi(f[3])
				break
			}
		}
	} else {
		if passwd, err = e.readDB(ctx, id, "/etc/passwd"); err != nil {
			return 0, 0, err
		}
		found := false
		for _, f := range passwd {
			if len(f) > 3 && f[0] == user {
				uid, _ = strconv.Atoi(f[2])
				gid, _ = strconv.Atoi(f[3])
				found = true
				break
			}
		}
		if !found {
			return 0, 0, errdefs.NotFound("user %q in the container's /etc/passwd", user)
		}
	}
	if !hasGroup || group == "" {
		return uid, gid, nil
	}
	if n, err := strconv.Atoi(group); err == nil {
		return uid, n, nil
	}
	groups, err := e.readDB(ctx, id, "/etc/group")
	if err != nil {
		return 0, 0, err
	}
	for _, f := range groups {
		if len(f) > 2 && f[0] == group {
			gid, _ = strconv.Atoi(f[2])
			return uid, gid, nil
		}
	}
	return 0, 0, errdefs.NotFound("group %q in the container's /etc/group", group)
}

// readDB reads a colon-separated database such as /etc/passwd from the
// container; a missing file is empty.
func (e *Docker) readDB(ctx context.Context, id, file string) ([][]string, error) {
	res, err := e.engine.CopyFromContainer(ctx, id, client.CopyFromContainerOptions{SourcePath: file})
	if cerrdefs.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s in the container: %w", file, dockerengine.Classify(err))
	}
	defer res.Content.Close()
	tr := tar.NewReader(res.Content)
	hdr, err := tr.Next()
	if err != nil || hdr.Typeflag != tar.TypeReg {
		return nil, nil
	}
	b, err := io.ReadAll(io.LimitReader(tr, 4<<20))
	if err != nil {
		return nil, fmt.Errorf("read %s in the container: %w", file, err)
	}
	var out [][]string
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		out = append(out, strings.Split(line, ":"))
	}
	return out, nil
}
