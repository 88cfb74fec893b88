package ec2test

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"
)

// IMDS is a fake EC2 instance metadata service for one instance, speaking
// IMDSv2 as EC2 does: a session token from PUT /latest/api/token (its
// lifetime in the X-aws-ec2-metadata-token-ttl-seconds header, 1-21600),
// then reads with the token in X-aws-ec2-metadata-token; a read without a
// valid token is 401 (IMDSv2 required, as nodemgr's machines are made).
// It serves the two documents a spot instance's notices live in:
// meta-data/spot/instance-action and
// meta-data/events/recommendations/rebalance, 404 until a test posts one.
type IMDS struct {
	// URL is the endpoint, for the agent's imds setting.
	URL string

	mu        sync.Mutex
	tokens    map[string]time.Time // token → expiry
	action    *instanceAction
	rebalance *time.Time
	calls     map[string]int // by "METHOD path"
	refused   int            // reads refused for want of a valid token
}

type instanceAction struct {
	Action string `json:"action"`
	Time   string `json:"time"`
}

// NewIMDS starts a fake metadata service, stopped when the test ends.
func NewIMDS(t testing.TB) *IMDS {
	t.Helper()
	m := &IMDS{tokens: map[string]time.Time{}, calls: map[string]int{}}
	srv := httptest.NewServer(http.HandlerFunc(m.serve))
	t.Cleanup(srv.Close)
	m.URL = srv.URL
	return m
}

// IMDS is the metadata service of instance id, started on first use.
func (s *Server) IMDS(t testing.TB, id string) (*IMDS, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	inst := s.find(id)
	if inst == nil {
		return nil, fmt.Errorf("no instance %s", id)
	}
	if s.imds == nil {
		s.imds = map[string]*IMDS{}
	}
	if s.imds[id] == nil {
		s.imds[id] = NewIMDS(t)
	}
	return s.imds[id], nil
}

// NoticeInterruption posts an interruption notice on a running spot
// instance's metadata service, as EC2 does two minutes before it takes
// the instance back: action (terminate, stop or hibernate) at at. The
// instance keeps running; InterruptSpot then takes it.
func (s *Server) NoticeInterruption(t testing.TB, id, action string, at time.Time) error {
	s.mu.Lock()
	inst := s.find(id)
	if inst != nil {
		s.advance(inst)
	}
	s.mu.Unlock()
	switch {
	case inst == nil:
		return fmt.Errorf("no instance %s", id)
	case !inst.Spot:
		return fmt.Errorf("instance %s is not a spot instance", id)
	case inst.State != "running":
		return fmt.Errorf("instance %s is %s", id, inst.State)
	}
	m, err := s.IMDS(t, id)
	if err != nil {
		return err
	}
	m.NoticeInterruption(action, at)
	return nil
}

// NoticeInterruption makes spot/instance-action say that the instance is
// to be terminated, stopped or hibernated (action) at at.
func (m *IMDS) NoticeInterruption(action string, at time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.action = &instanceAction{Action: action, Time: at.UTC().Format("2006-01-02T15:04:05Z")}
}

// RecommendRebalance makes events/recommendations/rebalance say that a
// rebalance was recommended at at.
func (m *IMDS) RecommendRebalance(at time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	at = at.UTC().Truncate(time.Second)
	m.rebalance = &at
}

// Clear takes both notices down (404 again).
func (m *IMDS) Clear() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.action, m.rebalance = nil, nil
}

// Calls counts the requests for method and path ("PUT /latest/api/token").
func (m *IMDS) Calls(method, path string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.calls[method+" "+path]
}

// Refused counts the reads refused 401 for want of a valid token.
func (m *IMDS) Refused() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.refused
}

// Paths of the documents the fake serves.
const (
	IMDSTokenPath     = "/latest/api/token"
	IMDSActionPath    = "/latest/meta-data/spot/instance-action"
	IMDSRebalancePath = "/latest/meta-data/events/recommendations/rebalance"
)

func (m *IMDS) serve(w http.ResponseWriter, r *http.Request) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.calls[r.Method+" "+r.URL.Path]++
	if r.URL.Path == IMDSTokenPath {
		m.token(w, r)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		http.Error(w, "Method Not Allowed", http.StatusMethodNotAllowed)
		return
	}
	if exp, ok := m.tokens[r.Header.Get("X-aws-ec2-metadata-token")]; !ok || time.Now().After(exp) {
		m.refused++
		http.Error(w, "Unauthorized", http.StatusUnauthorized)
		return
	}
	var doc any
	switch r.URL.Path {
	case IMDSActionPath:
		if m.action != nil {
			doc = m.action
		}
	case IMDSRebalancePath:
		if m.rebalance != nil {
			doc = map[string]string{"noticeTime": m.rebalance.Format("2006-01-02T15:04:05Z")}
		}
	}
	if doc == nil {
		http.NotFound(w, r)
		return
	}
	// EC2 serves these as text/plain.
	w.Header().Set("Content-Type", "text/plain")
	json.NewEncoder(w).Encode(doc)
}

// token answers PUT /latest/api/token: a token for the TTL asked, which
// must be 1-21600 seconds; EC2 refuses a PUT that came through a proxy
// (X-Forwarded-For) too.
func (m *IMDS) token(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPut {
		http.Error(w, "Method Not Allowed", http.StatusMethodNotAllowed)
		return
	}
	if r.Header.Get("X-Forwarded-For") != "" {
		http.Error(w, "Forbidden", http.StatusForbidden)
		return
	}
	ttl, err := strconv.Atoi(r.Header.Get("X-aws-ec2-metadata-token-ttl-seconds"))
	if err != nil || ttl < 1 || ttl > 21600 {
		http.Error(w, "Bad Request", http.StatusBadRequest)
		return
	}
	b := make([]byte, 24)
	rand.Read(b)
	tok := hex.EncodeToString(b)
	m.tokens[tok] = time.Now().Add(time.Duration(ttl) * time.Second)
	w.Header().Set("X-aws-ec2-metadata-token-ttl-seconds", strconv.Itoa(ttl))
	w.Write([]byte(tok))
}
