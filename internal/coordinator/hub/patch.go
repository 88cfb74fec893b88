package hub

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/validate"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
)

// ValidatePatch checks a change of a node's tags, labels and groups.
func ValidatePatch(p api.NodePatch) error {
	if p.SetTags != nil {
		if err := validate.Tags("set_tags", *p.SetTags); err != nil {
			return err
		}
	}
	if err := validate.Tags("add_tags", p.AddTags); err != nil {
		return err
	}
	if err := validate.Tags("remove_tags", p.RemoveTags); err != nil {
		return err
	}
	if err := validate.Labels("set_labels", p.SetLabels); err != nil {
		return err
	}
	if err := validate.LabelKeys("remove_labels", p.RemoveLabels); err != nil {
		return err
	}
	if p.SetGroups != nil {
		if err := validate.Groups("set_groups", *p.SetGroups); err != nil {
			return err
		}
	}
	return nil
}

// applyPatch edits n in place.
func applyPatch(n *store.Node, p api.NodePatch) {
	if p.SetTags != nil {
		n.Tags = slices.Clone(*p.SetTags)
	}
	for _, t := range p.AddTags {
		if !slices.Contains(n.Tags, t) {
			n.Tags = append(n.Tags, t)
		}
	}
	n.Tags = slices.DeleteFunc(n.Tags, func(t string) bool { return slices.Contains(p.RemoveTags, t) })
	if n.Labels == nil {
		n.Labels = map[string]string{}
	}
	for k, v := range p.SetLabels {
		n.Labels[k] = v
	}
	for _, k := range p.RemoveLabels {
		delete(n.Labels, k)
	}
	if p.SetGroups != nil {
		n.Groups = slices.Clone(*p.SetGroups)
		sort.Strings(n.Groups)
	}
}

// Patch changes a node's tags, labels and groups (p checked already) and
// tells its agent.
func (h *Hub) Patch(ctx context.Context, nodeID string, p api.NodePatch) (store.Node, error) {
	n, err := h.store.UpdateNode(ctx, nodeID, func(n *store.Node) error {
		applyPatch(n, p)
		return nil
	})
	if err != nil {
		return store.Node{}, fmt.Errorf("update node: %w", err)
	}
	body, _ := json.Marshal(api.NodeUpdate{Tags: n.Tags, Labels: n.Labels, Groups: n.Groups})
	return n, h.Notify(ctx, n.ID, api.NotifyUpdate, body)
}
