package storetest

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
)

// BenchNodeReadsBlob measures authorizing a node's blob downloads as an
// agent makes them when it starts tasks with many inputs: every input of
// every held task, fetched in parallel. The store holds 32 Running tasks
// of 1,000 inputs on the node, beside 2,000 other tasks of 50 inputs; ten
// "popular" digests are inputs of all of them. Sub-benchmarks, in one run:
//
//   - authenticate: TokenByHash, what every request pays before anything
//     else: the baseline to compare with;
//   - held: a digest of one of the node's tasks (true);
//   - popular: a digest 2,032 tasks name (true): its cost must not grow
//     with that count;
//   - denied: an input of a task the node does not hold (false), which
//     probes every held task.
//
// Both stores' tests call it from BenchmarkNodeReadsBlob.
func BenchNodeReadsBlob(b *testing.B, s store.Store) {
	ctx := b.Context()
	l := LoadHeldInputs(b, s)
	reads := func(digests []string, want bool) func(b *testing.B) {
		return func(b *testing.B) {
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					d := digests[rand.IntN(len(digests))]
					got, err := s.NodeReadsBlob(ctx, "n1", d)
					if err != nil || got != want {
						b.Fatalf("NodeReadsBlob(n1, %s) = %v, %v, want %v", d, got, err, want)
					}
				}
			})
		}
	}
	b.Run("authenticate", func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := s.TokenByHash(ctx, l.TokenHash); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
	b.Run("held", reads(l.Held, true))
	b.Run("popular", reads(l.Popular, true))
	b.Run("denied", reads(l.Others, false))
}

// HeldInputs are the digests LoadHeldInputs made.
type HeldInputs struct {
	Held      []string // inputs of the 32 tasks Running on n1
	Popular   []string // inputs of every task
	Others    []string // inputs of tasks n1 does not hold
	TokenHash []byte   // of n1's credential
}

// LoadHeldInputs gives s node n1 holding 32 Running tasks of 1,000 inputs
// (suite "build"), and 2,000 Ready tasks of 50 inputs (suite "crowd"), all
// in group a; ten popular digests are inputs of every task.
func LoadHeldInputs(tb testing.TB, s store.Store) HeldInputs {
	tb.Helper()
	ctx := tb.Context()
	check := func(err error) {
		tb.Helper()
		if err != nil {
			tb.Fatal(err)
		}
	}
	_, err := s.CreateNode(ctx, store.Node{ID: "n1", MachineID: "m1", DataDir: "/d", Groups: []string{"a"}})
	check(err)
	l := HeldInputs{TokenHash: []byte("0123456789abcdef0123456789abcdef")}
	check(s.CreateToken(ctx, store.Token{ID: "t1", Kind: api.TokenNode, NodeID: "n1", Hash: l.TokenHash}))
	for i := range 10 {
		l.Popular = append(l.Popular, digestOf(fmt.Sprint("popular-", i)))
	}
	addSuite := func(id string, tasks, inputs int) []string {
		tb.Helper()
		su := newSuite(id)
		su.Spec.Group = "a"
		check(s.CreateSuite(ctx, su))
		var unique []string
		batch := make([]store.Task, tasks)
		for i := range batch {
			files := make([]api.TaskFile, inputs)
			for j := range files {
				d := l.Popular[j%len(l.Popular)]
				if j >= len(l.Popular) {
					d = digestOf(fmt.Sprintf("%s-%d-%d", id, i, j))
					unique = append(unique, d)
				}
				files[j] = api.TaskFile{Path: fmt.Sprintf("src/%d.h", j), Digest: d, Size: 100}
			}
			batch[i] = store.Task{ID: fmt.Sprintf("%s-%05d", id, i), Spec: api.TaskSpec{Argv: []string{"cc"}, Inputs: files}}
		}
		for len(batch) > 0 {
			n := min(len(batch), 200)
			check(s.AddTasks(ctx, id, batch[:n]))
			batch = batch[n:]
		}
		return unique
	}
	l.Others = addSuite("crowd", 2000, 50)
	l.Held = addSuite("build", 32, 1000)
	claimed, err := s.ClaimTasks(ctx, "build", "n1", 32)
	check(err)
	if len(claimed) != 32 {
		tb.Fatalf("claimed %d tasks, want 32", len(claimed))
	}
	return l
}

// BenchAddTasksWithInputs measures one submission of 100 tasks of 100
// inputs each (half of them shared by all), the cost task_files adds to
// submitting: both stores' tests run it on a store as it is and on one
// whose task_files trigger was dropped (the store before task_files), in
// one run.
func BenchAddTasksWithInputs(b *testing.B, s store.Store) {
	ctx := b.Context()
	su := newSuite("s1")
	su.Spec.Group = "a"
	if err := s.CreateSuite(ctx, su); err != nil {
		b.Fatal(err)
	}
	batch := 0
	for b.Loop() {
		tasks := make([]store.Task, 100)
		for i := range tasks {
			files := make([]api.TaskFile, 100)
			for j := range files {
				d := digestOf(fmt.Sprint("shared-", j))
				if j%2 == 1 {
					d = digestOf(fmt.Sprintf("own-%d-%d-%d", batch, i, j))
				}
				files[j] = api.TaskFile{Path: fmt.Sprintf("src/%d.c", j), Digest: d, Size: 100}
			}
			tasks[i] = store.Task{ID: fmt.Sprintf("t-%d-%d", batch, i), Spec: api.TaskSpec{Argv: []string{"cc"}, Inputs: files}}
		}
		if err := s.AddTasks(ctx, "s1", tasks); err != nil {
			b.Fatal(err)
		}
		batch++
	}
	b.ReportMetric(float64(100*b.N)/b.Elapsed().Seconds(), "tasks/s")
}
