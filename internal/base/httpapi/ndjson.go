package httpapi

import (
	"encoding/json"
	"errors"
	"net/http"
	"sync"
)

// NDJSON writes a stream of events as an answer, one flushed JSON line
// each. Safe for concurrent use (a command's stdout and stderr are copied
// in goroutines of their own).
type NDJSON struct {
	w http.ResponseWriter

	mu  sync.Mutex
	err error // the first write error: the client is gone
}

// StartNDJSON sends the status line at once, so that the client knows the
// work is under way however long it stays silent.
func StartNDJSON(w http.ResponseWriter) *NDJSON {
	s := &NDJSON{w: w}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	s.flush()
	return s
}

// Send writes one event; after a failed write, every Send fails.
func (s *NDJSON) Send(ev any) error {
	b, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return s.err
	}
	if _, err := s.w.Write(append(b, '\n')); err != nil {
		s.err = err
		return err
	}
	s.flush()
	return s.err
}

func (s *NDJSON) flush() {
	if err := http.NewResponseController(s.w).Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		s.err = err
	}
}
