package bench

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/client"
)

// TestFinishSpanRefusesAPartialList: a server that lists fewer results
// than the bench submitted (an older API that stops after one page) makes
// the bench fail, not report a rate over part of the tasks.
func TestFinishSpanRefusesAPartialList(t *testing.T) {
	now := time.Now()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var list api.TaskList
		for i := range 3 {
			at := now.Add(time.Duration(i) * time.Second)
			list.Tasks = append(list.Tasks, api.Task{ID: "t", Result: &api.TaskResult{FinishedAt: at}})
		}
		json.NewEncoder(w).Encode(list) // no next: "the last page"
	}))
	defer srv.Close()
	c := client.New(srv.URL, "token")
	first, last, err := finishSpan(t.Context(), c, "s-1", 3)
	if err != nil || last.Sub(first) != 2*time.Second {
		t.Fatalf("all 3 results listed: span %s, %v; want 2s, nil", last.Sub(first), err)
	}
	if _, _, err := finishSpan(t.Context(), c, "s-1", 1000); err == nil || !strings.Contains(err.Error(), "showed 3 results, want 1000") {
		t.Errorf("3 of 1000 results listed = %v, want an error saying so", err)
	}
}
