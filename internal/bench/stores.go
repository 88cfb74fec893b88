package bench

import (
	"context"
	"fmt"
	"io"
)

// StoreResult is one store's in-process dispatch at one prefetch: the
// median of the rounds, and its rate over SQLite's in the same rounds.
type StoreResult struct {
	Store    string         `json:"store"` // sqlite, postgres×N
	Prefetch int            `json:"prefetch"`
	Result   DispatchResult `json:"result"`
	VsSQLite float64        `json:"vs_sqlite"` // median of the rounds' ratios
}

// CompareStores runs the in-process cases of RunDispatch on SQLite, on
// PostgreSQL with one server, and with replicas servers (the agent on the
// first, tasks submitted through the last), each rig started side by side
// and the rounds rotating which goes first, so that the machine's drift
// falls on all. db is a PostgreSQL server URL whose user may create
// databases: each PostgreSQL rig gets a fresh one.
func CompareStores(ctx context.Context, cfg DispatchConfig, db string, replicas, rounds int, progress io.Writer) ([]StoreResult, error) {
	stores := []AgentsConfig{{Binary: cfg.Binary}, {Binary: cfg.Binary, DB: db, Replicas: 1}}
	if replicas > 1 {
		stores = append(stores, AgentsConfig{Binary: cfg.Binary, DB: db, Replicas: replicas})
	}
	rigs := make([]*rig, len(stores))
	for i, st := range stores {
		fmt.Fprintf(progress, "  starting %s\n", storeLabel(st))
		r, err := startRigOn(ctx, st, fmt.Sprintf("bench-store-%d", i))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", storeLabel(st), err)
		}
		defer r.close()
		rigs[i] = r
	}
	var out []StoreResult
	for _, pf := range cfg.Prefetches {
		results := make([][]DispatchResult, len(rigs))
		ratios := make([][]float64, len(rigs))
		for round := range max(1, rounds) {
			got := make([]DispatchResult, len(rigs))
			for k := range rigs {
				i := (k + round) % len(rigs) // rotate who goes first
				fmt.Fprintf(progress, "  round %d, %s: prefetch %d: %d tasks", round+1, storeLabel(stores[i]), pf, cfg.Tasks)
				res, err := rigs[i].dispatchCase(ctx, cfg, "in-process", pf, cfg.Tasks)
				if err != nil {
					fmt.Fprintln(progress)
					return out, fmt.Errorf("%s prefetch %d: %w", storeLabel(stores[i]), pf, err)
				}
				// Each round's rate, so that a round far from the others
				// (the machine busy meanwhile) shows beside the medians.
				fmt.Fprintf(progress, ": %.0f/s\n", res.PerSecond)
				got[i] = res
			}
			for i := range rigs {
				results[i] = append(results[i], got[i])
				ratios[i] = append(ratios[i], got[i].PerSecond/got[0].PerSecond)
			}
		}
		for i := range rigs {
			out = append(out, StoreResult{Store: storeLabel(stores[i]), Prefetch: pf, Result: medianResult(results[i]), VsSQLite: median(ratios[i])})
		}
	}
	return out, nil
}

// storeLabel names a rig's store.
func storeLabel(c AgentsConfig) string {
	if c.DB == "" {
		return "sqlite"
	}
	return fmt.Sprintf("postgres×%d", max(c.Replicas, 1))
}
