package ui

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"sync"
	"time"

	"github.com/nodemgr/nodemgr/api"
)

// Cookie names. The session cookie is HttpOnly and SameSite=Strict, scoped
// to /ui: the API takes bearer tokens only, so a cookie can never act on it.
const (
	sessionCookie = "nodemgr_session"
	loginCookie   = "nodemgr_login" // the login form's double-submit CSRF token
)

// session is one logged-in browser. Its token is the user's API token: the
// ui makes every API request with it. token, user and expires change on
// renewal, under sessions.mu.
type session struct {
	key     string // sha256 of the cookie's id: the map key
	token   string
	csrf    string
	user    api.User
	expires time.Time
	feed    *feed // the live events of this session, started by its first page

	mu    sync.Mutex
	flash flash // a one-time message for the next page (an action's result)
}

// flash is an action's outcome, shown once on the page it returns to.
type flash struct {
	Text string
	Bad  bool
}

func (s *session) setFlash(f flash) {
	s.mu.Lock()
	s.flash = f
	s.mu.Unlock()
}

func (s *session) takeFlash() flash {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.flash
	s.flash = flash{}
	return f
}

// sessions keeps the live sessions in memory, keyed by a hash of their ids
// so that a lookup's timing says nothing about a valid id.
type sessions struct {
	mu  sync.Mutex
	m   map[string]*session
	max int
}

// maxSessions bounds memory: past it, the session closest to its expiry
// makes room.
const maxSessions = 10_000

func newSessions() *sessions { return &sessions{m: map[string]*session{}, max: maxSessions} }

func randomID() string {
	b := make([]byte, 32)
	rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

func hashID(id string) string {
	sum := sha256.Sum256([]byte(id))
	return base64.RawURLEncoding.EncodeToString(sum[:])
}

// create stores a new session with its feed and returns it with the id for
// its cookie.
func (ss *sessions) create(token string, user api.User, expires, now time.Time, f *feed) (*session, string) {
	id := randomID()
	s := &session{key: hashID(id), token: token, csrf: randomID(), user: user, expires: expires, feed: f}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	ss.prune(now)
	if len(ss.m) >= ss.max {
		ss.evictOldest()
	}
	ss.m[s.key] = s
	return s, id
}

// get returns the unexpired session of a cookie id, or nil.
func (ss *sessions) get(id string, now time.Time) *session {
	if id == "" {
		return nil
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	s := ss.m[hashID(id)]
	if s == nil || !now.Before(s.expires) {
		return nil
	}
	return s
}

// read returns what renew may change, under the lock.
func (ss *sessions) read(s *session) (token string, user api.User, expires time.Time) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return s.token, s.user, s.expires
}

func (ss *sessions) renew(s *session, token string, user api.User, expires time.Time) {
	ss.mu.Lock()
	s.token, s.user, s.expires = token, user, expires
	ss.mu.Unlock()
}

func (ss *sessions) remove(s *session) {
	ss.mu.Lock()
	delete(ss.m, s.key)
	ss.mu.Unlock()
	s.feed.stop()
}

// prune drops expired sessions; ss.mu is held.
func (ss *sessions) prune(now time.Time) {
	for k, s := range ss.m {
		if !now.Before(s.expires) {
			delete(ss.m, k)
			s.feed.stop()
		}
	}
}

func (ss *sessions) evictOldest() {
	var oldest *session
	for _, s := range ss.m {
		if oldest == nil || s.expires.Before(oldest.expires) {
			oldest = s
		}
	}
	if oldest != nil {
		delete(ss.m, oldest.key)
		oldest.feed.stop()
	}
}

// closeAll ends every session's feed (the server is stopping).
func (ss *sessions) closeAll() {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	for k, s := range ss.m {
		s.feed.stop()
		delete(ss.m, k)
	}
}

// validCSRF compares in constant time: the token is a secret.
func validCSRF(want, got string) bool {
	return want != "" && subtle.ConstantTimeCompare([]byte(want), []byte(got)) == 1
}

// limiter allows each client address a burst of login attempts that
// refills slowly, so that guessing tokens through the form is hopeless
// (they are 256-bit anyway) and a flood does not load the store.
type limiter struct {
	mu      sync.Mutex
	buckets map[string]*bucket
	rate    float64 // attempts per second
	burst   float64
}

type bucket struct {
	tokens float64
	at     time.Time
}

func newLimiter(perMinute, burst int) *limiter {
	return &limiter{buckets: map[string]*bucket{}, rate: float64(perMinute) / 60, burst: float64(burst)}
}

func (l *limiter) allow(key string, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.buckets) > 100_000 {
		clear(l.buckets) // bounded memory; a flood of addresses only resets
	}
	b := l.buckets[key]
	if b == nil {
		b = &bucket{tokens: l.burst, at: now}
		l.buckets[key] = b
	}
	b.tokens = min(l.burst, b.tokens+now.Sub(b.at).Seconds()*l.rate)
	b.at = now
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// setCookie writes a /ui cookie: HttpOnly, SameSite=Strict, Secure on TLS.
func setCookie(w http.ResponseWriter, r *http.Request, name, value string, expires time.Time) {
	c := &http.Cookie{Name: name, Value: value, Path: "/ui", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil}
	if value == "" {
		c.MaxAge = -1
	} else if !expires.IsZero() {
		c.Expires = expires
	}
	http.SetCookie(w, c)
}
