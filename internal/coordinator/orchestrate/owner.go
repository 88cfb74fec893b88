package orchestrate

import (
	"context"
	"time"

	"github.com/nodemgr/nodemgr/internal/base/auth"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
)

// Lead runs the orchestrator while this server leads (ctx ends with the
// term). The
// coordinator's owner ID is read, or made on the first term, here: by the
// leader alone and fenced by its term, so servers that start at once on an
// empty store cannot each make one of their own.
func (o *Orchestrator) Lead(ctx context.Context) {
	for {
		owner, err := o.ownerID(ctx)
		if err == nil {
			o.SetOwner(owner)
			break
		}
		if ctx.Err() != nil {
			return
		}
		o.log.Warn("read the coordinator's owner id; retrying in 5s", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(5 * time.Second):
		}
	}
	o.Run(ctx)
}

// ownerID is this coordinator's ID, made on first start and kept in the
// store: the owner label on every machine its pools make.
func (o *Orchestrator) ownerID(ctx context.Context) (string, error) {
	d, err := o.store.GetDocument(ctx, "cluster", "owner")
	if err == nil {
		return string(d.Body), nil
	}
	if !errdefs.IsNotFound(err) {
		return "", err
	}
	id := auth.NewID("c-")
	if _, err := o.store.PutDocument(ctx, store.Document{Kind: "cluster", Name: "owner", Body: []byte(id)}); err != nil {
		return "", err
	}
	return id, nil
}
