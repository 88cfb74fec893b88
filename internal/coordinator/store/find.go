package store

import (
	"context"
	"strings"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
)

// NodeFinder reads nodes.
type NodeFinder interface {
	GetNode(ctx context.Context, id string) (Node, error)
	ListNodes(ctx context.Context, f NodeFilter) ([]Node, error)
}

// FindNode finds a node by ID, name or unique ID prefix among the nodes
// visible (nil: all).
func FindNode(ctx context.Context, st NodeFinder, ref string, visible func(Node) bool) (Node, error) {
	if visible == nil {
		visible = func(Node) bool { return true }
	}
	n, err := st.GetNode(ctx, ref)
	if err == nil && visible(n) {
		return n, nil
	}
	if err != nil && !errdefs.IsNotFound(err) {
		return Node{}, err
	}
	all, err := st.ListNodes(ctx, NodeFilter{})
	if err != nil {
		return Node{}, err
	}
	var byName, byPrefix []Node
	for _, n := range all {
		if !visible(n) {
			continue
		}
		if n.Name == ref {
			byName = append(byName, n)
		}
		if strings.HasPrefix(n.ID, ref) {
			byPrefix = append(byPrefix, n)
		}
	}
	for _, matches := range [][]Node{byName, byPrefix} {
		switch len(matches) {
		case 0:
			continue
		case 1:
			return matches[0], nil
		default:
			ids := make([]string, len(matches))
			for i, m := range matches {
				ids[i] = m.ID
			}
			return Node{}, errdefs.Conflict("node %q is ambiguous: it matches %s; use the node ID", ref, strings.Join(ids, ", "))
		}
	}
	return Node{}, errdefs.NotFound("node %q (see nodemgr node ls)", ref)
}
