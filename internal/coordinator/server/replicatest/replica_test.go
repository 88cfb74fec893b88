package replicatest

import (
	"strings"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/internal/coordinator/store/postgres/pgtest"
)

// TestSecondServerOnOneReplicaIDIsRefused: two live processes started with
// one --replica-id would both lead in one term (each renews "its" lease);
// the second is refused at start, naming the reason, and the first goes on
// leading.
func TestSecondServerOnOneReplicaIDIsRefused(t *testing.T) {
	db := pgtest.NewDatabase(t)
	first := startReplica(t, db, "r-twin")
	waitLeader(t, time.Minute, first, first)
	second := startReplica(t, db, "r-twin")
	select {
	case <-second.done:
	case <-time.After(10 * time.Second):
		t.Fatal("a second server with the same replica id is still running after 10s")
	}
	if second.err == nil || !strings.Contains(second.err.Error(), `another server is running with replica id "r-twin"`) {
		t.Fatalf("the second server's Serve = %v, want a refusal naming the replica id", second.err)
	}
	if h := first.health(t); !h.Leader {
		t.Errorf("the first server no longer leads after the second was refused: %+v", h)
	}
}

// TestRestartedReplicaTakesItsLeaseBack: a replica killed without
// releasing its lease comes back under the same id once that lease runs
// out: its old instance renews no more, so it is not mistaken for a twin.
func TestRestartedReplicaTakesItsLeaseBack(t *testing.T) {
	db := pgtest.NewDatabase(t)
	r := startReplica(t, db, "r-again")
	waitLeader(t, time.Minute, r, r)
	if _, err := r.store.AcquireLease(t.Context(), "replica/r-crashed", "r-crashed#00000000", time.Second); err != nil {
		t.Fatal(err)
	}
	back := startReplica(t, db, "r-crashed")
	time.Sleep(3 * time.Second) // past the old lease
	select {
	case <-back.done:
		t.Fatalf("the restarted replica stopped: %v", back.err)
	default:
	}
	if h := back.health(t); h.Replica != "r-crashed" {
		t.Errorf("/healthz of the restarted replica = %+v", h)
	}
}
