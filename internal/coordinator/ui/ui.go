package ui

import (
	"context"
	"embed"
	"fmt"
	"html/template"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/nodemgr/nodemgr/api"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Config tunes the dashboard. Zero values take the defaults.
type Config struct {
	// SessionTTL is how long a login lasts, unless the token expires
	// sooner; default 12h.
	SessionTTL time.Duration
	// PollInterval is how often a watched session's feed polls the API
	// for changes; default 1s.
	PollInterval time.Duration
	// Heartbeat is how often an idle event stream sends a comment, so
	// proxies keep it open and the browser notices a dead one; default 15s.
	Heartbeat time.Duration
	// Now is the clock (tests); default time.Now.
	Now func() time.Time
}

func (c *Config) setDefaults() {
	if c.SessionTTL == 0 {
		c.SessionTTL = 12 * time.Hour
	}
	if c.PollInterval == 0 {
		c.PollInterval = time.Second
	}
	if c.Heartbeat == 0 {
		c.Heartbeat = 15 * time.Second
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

// UI is the dashboard's HTTP handler, mounted at /ui/.
type UI struct {
	cfg      Config
	api      http.Handler
	log      *slog.Logger
	pages    map[string]*template.Template
	sessions *sessions
	logins   *limiter
	mux      *http.ServeMux
}

// New makes the dashboard over the server's API handler, which it calls
// in-process with each session's token.
func New(cfg Config, apiHandler http.Handler, logger *slog.Logger) (*UI, error) {
	cfg.setDefaults()
	pages, err := parsePages()
	if err != nil {
		return nil, fmt.Errorf("dashboard templates: %w", err)
	}
	u := &UI{cfg: cfg, api: apiHandler, log: logger, pages: pages, sessions: newSessions(),
		logins: newLimiter(10, 10)}
	u.mux = u.routes()
	return u, nil
}

// Close ends every session's live feed.
func (u *UI) Close() error {
	u.sessions.closeAll()
	return nil
}

func (u *UI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	// The pages load nothing from elsewhere and are never framed.
	h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("X-Frame-Options", "DENY")
	u.mux.ServeHTTP(w, r)
}

func (u *UI) routes() *http.ServeMux {
	m := http.NewServeMux()
	m.Handle("GET /ui/static/", http.StripPrefix("/ui/", staticHandler()))
	m.HandleFunc("GET /ui/login", u.loginPage)
	m.HandleFunc("POST /ui/login", u.login)
	m.HandleFunc("POST /ui/logout", u.withSession(u.logout))
	m.HandleFunc("POST /ui/renew", u.withSession(u.renew))
	m.HandleFunc("GET /ui/events", u.events)

	m.HandleFunc("GET /ui/{$}", u.page(u.overview))
	m.HandleFunc("GET /ui/nodes", u.page(nodesPage))
	m.HandleFunc("GET /ui/nodes/{node}", u.page(u.nodePage))
	m.HandleFunc("GET /ui/suites", u.page(suitesPage))
	m.HandleFunc("GET /ui/suites/{suite}", u.page(u.suitePage))
	m.HandleFunc("GET /ui/tasks/{task}", u.page(u.taskPage))
	m.HandleFunc("GET /ui/network", u.page(u.networkPage))
	m.HandleFunc("GET /ui/network/{node}", u.page(u.overlayNodePage))
	m.HandleFunc("GET /ui/deployments", u.page(deploymentsPage))
	m.HandleFunc("GET /ui/ensembles", u.page(u.ensemblesPage))
	m.HandleFunc("GET /ui/ensembles/{ensemble}", u.page(u.ensemblePage))
	m.HandleFunc("GET /ui/pools", u.page(poolsPage))
	m.HandleFunc("GET /ui/pools/{pool}", u.page(u.poolPage))
	m.HandleFunc("GET /ui/templates", u.page(u.templatesPage))
	m.HandleFunc("GET /ui/templates/{name}", u.page(u.templatePage))
	m.HandleFunc("GET /ui/mappings", u.page(u.mappingsPage))
	m.HandleFunc("GET /ui/mappings/{name}", u.page(u.mappingPage))
	m.HandleFunc("GET /ui/logs", u.page(u.logsPage))
	m.HandleFunc("GET /ui/logs/more", u.withSession(u.logsMore))

	for _, a := range u.actions() {
		m.HandleFunc("POST "+a.path, u.withSession(u.act(a)))
	}
	m.HandleFunc("/ui/", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no such page; start at /ui/", http.StatusNotFound)
	})
	return m
}

func staticHandler() http.Handler {
	fsrv := http.FileServerFS(staticFS) // serves static/... after /ui/ is stripped
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-cache") // small files; always fresh after an upgrade
		fsrv.ServeHTTP(w, r)
	})
}

// session returns the request's live session, or nil.
func (u *UI) session(r *http.Request) *session {
	c, err := r.Cookie(sessionCookie)
	if err != nil {
		return nil
	}
	return u.sessions.get(c.Value, u.cfg.Now())
}

// withSession guards a state-changing or data request: a live session,
// and for POSTs its CSRF token (form field csrf or header X-CSRF-Token);
// else 403, with what to do.
func (u *UI) withSession(h func(http.ResponseWriter, *http.Request, *session)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s := u.session(r)
		if s == nil {
			http.Error(w, "not logged in, or the session expired: log in again at /ui/login", http.StatusForbidden)
			return
		}
		if r.Method == http.MethodPost {
			r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
			got := r.Header.Get("X-CSRF-Token")
			if got == "" {
				got = r.PostFormValue("csrf")
			}
			if !validCSRF(s.csrf, got) {
				http.Error(w, "missing or wrong CSRF token: reload the page and try again", http.StatusForbidden)
				return
			}
		}
		h(w, r, s)
	}
}

// pageFunc fills a page's data; its error is shown in the page.
type pageFunc func(ctx context.Context, r *http.Request, v *view) error

// page serves a GET page: without a session it sends the browser to the
// login, which brings it back here.
func (u *UI) page(fill pageFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s := u.session(r)
		if s != nil && !u.refresh(r.Context(), s) {
			s = nil
		}
		if s == nil {
			http.Redirect(w, r, "/ui/login?return="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
			return
		}
		v := u.newView(r, s)
		err := fill(r.Context(), r, v)
		if err != nil {
			v.Error = err.Error()
			w.WriteHeader(statusOf(err))
		}
		u.render(w, v)
	}
}

// refresh reads the session's user again, so that a page shows the roles
// the user has now, and ends the session when its token stopped working
// (revoked, expired, its user deleted). It reports whether the session
// lives on; an API that fails otherwise leaves it as it was.
func (u *UI) refresh(ctx context.Context, s *session) bool {
	token, _, expires := u.sessions.read(s)
	user, err := u.whoami(ctx, token)
	if err != nil {
		if statusOf(err) == http.StatusUnauthorized {
			u.sessions.remove(s)
			return false
		}
		return true
	}
	u.sessions.renew(s, token, user, expires)
	return true
}

// view is what every page's template gets.
type view struct {
	Page    string // template name
	Title   string
	Nav     string // the nav entry to highlight
	User    api.User
	CSRF    string
	Expires int64  // session end, unix ms, for the warning
	Since   uint64 // the live stream starts after this event id
	Flash   flash
	Error   string
	Return  string // this page, for actions to come back to
	Data    any
	c       caller
	s       *session
}

func (u *UI) newView(r *http.Request, s *session) *view {
	token, user, expires := u.sessions.read(s)
	c := caller{h: u.api, token: token}
	return &view{User: user, CSRF: s.csrf, Expires: expires.UnixMilli(),
		Since: s.feed.touch(r.Context()), Flash: takeFlash(r, s), Return: r.URL.RequestURI(), c: c, s: s}
}

// refreshHeader marks the page script's own fetch of the page it shows, to
// render its live panels again (app.js): it must not take a flash message
// meant for the next page the user opens.
const refreshHeader = "X-Nodemgr-Refresh"

func takeFlash(r *http.Request, s *session) flash {
	if r.Header.Get(refreshHeader) != "" {
		return flash{}
	}
	return s.takeFlash()
}

// Admin says whether the user is a superuser (pools, deployments,
// templates, mappings are theirs only).
func (v *view) Admin() bool { return v.User.Admin }

func (u *UI) render(w http.ResponseWriter, v *view) {
	t := u.pages[v.Page]
	if t == nil {
		t = u.pages["error"]
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if err := t.ExecuteTemplate(w, "layout", v); err != nil {
		u.log.Warn("render dashboard page", "page", v.Page, "err", err)
	}
}

// loginPage shows the token form, with the login's double-submit CSRF
// token in a cookie and the form.
func (u *UI) loginPage(w http.ResponseWriter, r *http.Request) {
	u.showLogin(w, r, "", http.StatusOK)
}

func (u *UI) showLogin(w http.ResponseWriter, r *http.Request, msg string, code int) {
	tok := randomID()
	setCookie(w, r, loginCookie, tok, time.Time{})
	v := &view{Page: "login", Title: "Log in", CSRF: tok, Error: msg, Return: safeReturn(r.FormValue("return"))}
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	u.render(w, v)
}

// login checks the token with GET /v1/whoami and starts a session.
func (u *UI) login(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 16<<10)
	if !u.logins.allow(clientAddr(r), u.cfg.Now()) {
		u.showLogin(w, r, "too many login attempts from this address: wait a minute and try again", http.StatusTooManyRequests)
		return
	}
	c, err := r.Cookie(loginCookie)
	if err != nil || !validCSRF(c.Value, r.PostFormValue("csrf")) {
		http.Error(w, "missing or wrong CSRF token: open /ui/login again and log in from there", http.StatusForbidden)
		return
	}
	token := strings.TrimSpace(r.PostFormValue("token"))
	if token == "" {
		u.showLogin(w, r, "paste an API token (nodemgr token create prints one; an admin's first token is in the server's data dir, file admin-token)", http.StatusBadRequest)
		return
	}
	user, err := u.whoami(r.Context(), token)
	if err != nil {
		u.showLogin(w, r, "that token does not work: "+err.Error(), http.StatusUnauthorized)
		return
	}
	expires := u.expiry(user)
	f := newFeed(caller{h: u.api, token: token}, u.cfg.PollInterval, u.cfg.Now)
	_, id := u.sessions.create(token, user, expires, u.cfg.Now(), f)
	setCookie(w, r, sessionCookie, id, expires)
	setCookie(w, r, loginCookie, "", time.Time{})
	http.Redirect(w, r, safeReturn(r.PostFormValue("return")), http.StatusSeeOther)
}

func (u *UI) whoami(ctx context.Context, token string) (api.User, error) {
	var user api.User
	err := caller{h: u.api, token: token}.get(ctx, "/v1/whoami", nil, &user)
	return user, err
}

// expiry is when a session of user ends: SessionTTL from now, or the
// token's own end if sooner.
func (u *UI) expiry(user api.User) time.Time {
	exp := u.cfg.Now().Add(u.cfg.SessionTTL)
	if user.TokenExpiresAt != nil && user.TokenExpiresAt.Before(exp) {
		exp = *user.TokenExpiresAt
	}
	return exp
}

func (u *UI) logout(w http.ResponseWriter, r *http.Request, s *session) {
	u.sessions.remove(s)
	setCookie(w, r, sessionCookie, "", time.Time{})
	http.Redirect(w, r, "/ui/login", http.StatusSeeOther)
}

// renew gives a session that is about to end a fresh lease (and a new
// token, if one is given) without leaving the page: the expiry warning
// posts here with fetch. It answers the new end, unix ms.
func (u *UI) renew(w http.ResponseWriter, r *http.Request, s *session) {
	token := strings.TrimSpace(r.PostFormValue("token"))
	old, oldUser, _ := u.sessions.read(s)
	if token == "" {
		token = old
	}
	user, err := u.whoami(r.Context(), token)
	if err != nil {
		http.Error(w, "renew the session: "+err.Error(), http.StatusUnauthorized)
		return
	}
	if user.Name != oldUser.Name {
		http.Error(w, "renew the session: that token is "+user.Name+"'s, not "+oldUser.Name+"'s; log out and log in as them instead", http.StatusBadRequest)
		return
	}
	expires := u.expiry(user)
	u.sessions.renew(s, token, user, expires)
	s.feed.setToken(token)
	c, _ := r.Cookie(sessionCookie)
	setCookie(w, r, sessionCookie, c.Value, expires)
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"expires":%d}`, expires.UnixMilli())
}

// safeReturn keeps a return-to address inside the dashboard, so the login
// cannot be used to send a user elsewhere.
func safeReturn(ret string) string {
	if !strings.HasPrefix(ret, "/ui/") || strings.HasPrefix(ret, "//") || strings.ContainsAny(ret, "\\\r\n") {
		return "/ui/"
	}
	return ret
}

func clientAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

func itoa(n int) string { return strconv.Itoa(n) }
