package e2e

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	"github.com/pb33f/libopenapi-validator/config"
	liberrors "github.com/pb33f/libopenapi-validator/errors"
	"github.com/pb33f/libopenapi-validator/helpers"
	"github.com/pb33f/libopenapi-validator/paths"
	"github.com/pb33f/libopenapi-validator/schema_validation"
	"github.com/pb33f/libopenapi/datamodel/high/base"
	v3 "github.com/pb33f/libopenapi/datamodel/high/v3"
)

// Every HTTP answer a server gives in these tests is checked against the
// OpenAPI document: the status must be one its operation lists, and the
// body must match that answer's schema. The check sits in a proxy in front
// of the server, so it sees the traffic of the CLI processes, the agents
// and the Go client alike. The proxy passes bytes through untouched, one
// backend connection per client connection, and reads a copy of each
// direction as HTTP/1.1: timeouts, connection counts and WebSockets behave
// as they do without it.

// maxCheckedBody caps the part of an answer kept for its check; longer ones
// (file copies) have their status checked only.
const maxCheckedBody = 4 << 20

// checksSchemas says whether a server started with these flags can sit
// behind the checking proxy: one that speaks TLS cannot (the proxy reads
// plain HTTP), and is served directly. NODEMGR_E2E_NOSCHEMA=1 serves every
// server directly, to tell whether the proxy has a part in a failure.
func checksSchemas(flags []string) bool {
	if os.Getenv("NODEMGR_E2E_NOSCHEMA") != "" {
		return false
	}
	for _, f := range flags {
		if strings.HasPrefix(f, "--tls") {
			return false
		}
	}
	return true
}

// schemaProxy listens for a server's clients, forwards their connections
// to the server at backend, and checks every answer.
type schemaProxy struct {
	t       testing.TB
	ln      net.Listener
	backend string
	wg      sync.WaitGroup

	mu       sync.Mutex
	conns    map[net.Conn]bool
	checked  int
	problems map[string]int // problem → times seen
}

// startSchemaProxy starts a proxy for a server that will listen on
// backend, and returns the address clients should use. At the end of the
// test it reports every answer that did not match the document.
func startSchemaProxy(t testing.TB, backend string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &schemaProxy{t: t, ln: ln, backend: backend, conns: map[net.Conn]bool{}, problems: map[string]int{}}
	p.wg.Add(1)
	go p.serve()
	// Registered before the server and its agents start, so it runs after
	// they are stopped: by then every answer is in.
	t.Cleanup(p.close)
	return ln.Addr().String()
}

func (p *schemaProxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go p.forward(c)
	}
}

func (p *schemaProxy) track(c net.Conn, on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if on {
		p.conns[c] = true
	} else {
		delete(p.conns, c)
	}
}

// forward joins a client connection to a new one to the server. While the
// server is down (restarts), the client's connection is closed at once, as
// close as a proxy can come to a refused connection.
func (p *schemaProxy) forward(client net.Conn) {
	defer p.wg.Done()
	defer client.Close()
	server, err := net.Dial("tcp", p.backend)
	if err != nil {
		return
	}
	defer server.Close()
	p.track(client, true)
	p.track(server, true)
	defer p.track(client, false)
	defer p.track(server, false)

	reqs, resps := newSniffer(), newSniffer()
	exchanges := make(chan *http.Request, 1024)
	var parsers sync.WaitGroup
	parsers.Add(2)
	go func() { defer parsers.Done(); readRequests(reqs, exchanges) }()
	go func() { defer parsers.Done(); p.readResponses(resps, exchanges) }()

	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn, copyTo *sniffer) {
		io.Copy(io.MultiWriter(dst, copyTo), src)
		copyTo.close()
		if tc, ok := dst.(*net.TCPConn); ok {
			tc.CloseWrite()
		}
		done <- struct{}{}
	}
	go pipe(server, client, reqs)
	go pipe(client, server, resps)
	<-done
	<-done
	parsers.Wait()
}

// readRequests parses the client's side of a connection and queues each
// request for its answer. It stops at a protocol upgrade: what follows is
// WebSocket frames.
func readRequests(in *sniffer, out chan<- *http.Request) {
	defer close(out)
	defer in.kill()
	br := bufio.NewReader(in)
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		io.Copy(io.Discard, req.Body)
		req.Body = http.NoBody
		out <- req
		if req.Header.Get("Upgrade") != "" {
			return
		}
	}
}

// readResponses parses the server's side of a connection, pairs each
// answer with its request, and checks it.
func (p *schemaProxy) readResponses(in *sniffer, reqs <-chan *http.Request) {
	defer in.kill()
	br := bufio.NewReader(in)
	for req := range reqs {
		resp, err := readFinalResponse(br, req)
		if err != nil {
			break
		}
		body, err := io.ReadAll(io.LimitReader(resp.Body, maxCheckedBody+1))
		complete := err == nil && len(body) <= maxCheckedBody
		if _, err := io.Copy(io.Discard, resp.Body); err != nil {
			complete = false // cut off: the check would only see part of it
		}
		if complete || len(body) > maxCheckedBody {
			p.record(req, resp, body, len(body) <= maxCheckedBody)
		}
		if resp.StatusCode == http.StatusSwitchingProtocols {
			break
		}
	}
	// What follows a protocol switch is not HTTP. Let the request reader
	// finish.
	in.kill()
	for range reqs {
	}
}

// readFinalResponse reads the answer to req, skipping interim ones (100
// Continue) but not a protocol switch.
func readFinalResponse(br *bufio.Reader, req *http.Request) (*http.Response, error) {
	for {
		resp, err := http.ReadResponse(br, req)
		if err != nil {
			return nil, err
		}
		if resp.StatusCode >= 200 || resp.StatusCode == http.StatusSwitchingProtocols {
			return resp, nil
		}
	}
}

func (p *schemaProxy) record(req *http.Request, resp *http.Response, body []byte, withBody bool) {
	problems := theSchemas().check(req, resp, body, withBody)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.checked++
	for _, pr := range problems {
		p.problems[pr]++
	}
}

// close stops the proxy and fails the test for each answer that did not
// match the document.
func (p *schemaProxy) close() {
	p.ln.Close()
	p.mu.Lock()
	for c := range p.conns {
		c.SetDeadline(time.Now().Add(2 * time.Second)) // let the last answers finish
	}
	p.mu.Unlock()
	waited := make(chan struct{})
	go func() { p.wg.Wait(); close(waited) }()
	select {
	case <-waited:
	case <-time.After(5 * time.Second):
		p.t.Errorf("schema proxy: connections still open 5s after the test; their answers were not all checked")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	var problems []string
	for pr, n := range p.problems {
		problems = append(problems, fmt.Sprintf("%s (seen %d times)", pr, n))
	}
	sort.Strings(problems)
	for _, pr := range problems {
		p.t.Errorf("answer does not match internal/coordinator/server/openapi.yaml: %s", pr)
	}
	p.t.Logf("schema proxy: checked %d answers against the OpenAPI document", p.checked)
}

// sniffer is an unbounded pipe: the forwarding side never waits for the
// parser. Once the parser gives up (kill), writes are dropped.
type sniffer struct {
	mu     sync.Mutex
	cond   *sync.Cond
	buf    []byte
	closed bool
	dead   bool
}

func newSniffer() *sniffer {
	s := &sniffer{}
	s.cond = sync.NewCond(&s.mu)
	return s
}

func (s *sniffer) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.dead {
		s.buf = append(s.buf, b...)
		s.cond.Signal()
	}
	return len(b), nil
}

func (s *sniffer) Read(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(s.buf) == 0 && !s.closed && !s.dead {
		s.cond.Wait()
	}
	if len(s.buf) == 0 {
		return 0, io.EOF
	}
	n := copy(b, s.buf)
	s.buf = s.buf[n:]
	if len(s.buf) == 0 {
		s.buf = nil // let a large upload's buffer go
	}
	return n, nil
}

func (s *sniffer) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	s.cond.Broadcast()
}

func (s *sniffer) kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dead, s.buf = true, nil
	s.cond.Broadcast()
}

// apiSchemas checks answers against the OpenAPI document.
type apiSchemas struct {
	mu         sync.Mutex // the validator's caches are not ours to trust with concurrency
	full       validator.Validator
	statusOnly validator.Validator // for streams, whose lines are checked one by one
	model      *v3.Document
	errorBody  *base.Schema
	opts       *config.ValidationOptions
	lines      schema_validation.SchemaValidator
}

var (
	schemasOnce sync.Once
	schemas     *apiSchemas
	schemasErr  error
)

// theSchemas loads the document once per test binary: the very file the
// server embeds and serves, or NODEMGR_E2E_OPENAPI's (to see the check fail
// on a document made wrong on purpose).
func theSchemas() *apiSchemas {
	file := filepath.Join("..", "coordinator", "server", "openapi.yaml")
	if f := os.Getenv("NODEMGR_E2E_OPENAPI"); f != "" {
		file = f
	}
	schemasOnce.Do(func() { schemas, schemasErr = loadSchemas(file) })
	if schemasErr != nil {
		panic(schemasErr) // the document's own tests say more
	}
	return schemas
}

func loadSchemas(file string) (*apiSchemas, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	doc, err := libopenapi.NewDocument(b)
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w", file, err)
	}
	m, err := doc.BuildV3Model()
	if err != nil {
		return nil, fmt.Errorf("build the model of %s: %w", file, err)
	}
	full, errs := validator.NewValidator(doc)
	statusOnly, errs2 := validator.NewValidator(doc, config.WithoutResponseBodyValidation())
	if err := errors.Join(append(errs, errs2...)...); err != nil {
		return nil, fmt.Errorf("validator for %s: %w", file, err)
	}
	eb, ok := m.Model.Components.Schemas.Get("ErrorBody")
	if !ok {
		return nil, fmt.Errorf("%s has no ErrorBody schema", file)
	}
	return &apiSchemas{full: full, statusOnly: statusOnly, model: &m.Model, errorBody: eb.Schema(),
		opts: config.NewValidationOptions(), lines: schema_validation.NewSchemaValidator()}, nil
}

// check returns what is wrong with an answer, each problem naming the
// request and the answer's status.
func (a *apiSchemas) check(req *http.Request, resp *http.Response, body []byte, withBody bool) []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if req.URL.Path == "/ui" || strings.HasPrefix(req.URL.Path, "/ui/") {
		// The dashboard: HTML pages for browsers, not the API the document
		// describes (its own tests, package ui and ui_test.go, check it).
		return nil
	}
	what := fmt.Sprintf("%s %s → %d", req.Method, req.URL.Path, resp.StatusCode)
	// A copy that the validator may read and close as it likes.
	r := *resp
	r.Body = io.NopCloser(bytes.NewReader(body))
	item, errs, _ := paths.FindPath(req, a.model, a.opts)
	var problems []error
	switch {
	case item == nil:
		problems = a.checkUnrouted(resp, body, http.StatusNotFound)
	case len(errs) > 0: // a documented path, but not with this method
		problems = a.checkUnrouted(resp, body, http.StatusMethodNotAllowed, http.StatusNotFound)
	case !withBody || resp.StatusCode == http.StatusSwitchingProtocols:
		_, errs := a.statusOnly.ValidateHttpResponse(req, &r)
		problems = asErrors(errs)
	case isNDJSON(resp):
		_, errs := a.statusOnly.ValidateHttpResponse(req, &r)
		problems = append(asErrors(errs), a.checkLines(req, item, resp, body)...)
	default:
		_, errs := a.full.ValidateHttpResponse(req, &r)
		problems = asErrors(errs)
	}
	var out []string
	for _, p := range problems {
		out = append(out, fmt.Sprintf("%s: %v; body: %.300q", what, p, body))
	}
	return out
}

// checkUnrouted checks an answer to a request for no documented operation:
// it must be an error body with one of the codes.
func (a *apiSchemas) checkUnrouted(resp *http.Response, body []byte, codes ...int) []error {
	if !slices.Contains(codes, resp.StatusCode) {
		return []error{fmt.Errorf("a request for no documented operation must get one of %v", codes)}
	}
	_, errs := a.lines.ValidateSchemaBytes(a.errorBody, body)
	return asErrors(errs)
}

// checkLines checks each line of an NDJSON stream against its schema.
func (a *apiSchemas) checkLines(req *http.Request, item *v3.PathItem, resp *http.Response, body []byte) []error {
	op := helpers.ExtractOperation(req, item)
	if op == nil || op.Responses == nil {
		return nil // the status check has said so
	}
	r := op.Responses.Codes.GetOrZero(fmt.Sprint(resp.StatusCode))
	if r == nil {
		return nil
	}
	mt, ok := helpers.FindMediaType(r.Content, resp.Header.Get("Content-Type"))
	if !ok || mt.Schema == nil {
		return []error{fmt.Errorf("no schema for %s lines", resp.Header.Get("Content-Type"))}
	}
	var problems []error
	for i, line := range bytes.Split(bytes.TrimSuffix(body, []byte("\n")), []byte("\n")) {
		if _, errs := a.lines.ValidateSchemaBytes(mt.Schema.Schema(), line); len(errs) > 0 {
			problems = append(problems, fmt.Errorf("line %d: %w", i+1, errors.Join(asErrors(errs)...)))
		}
	}
	return problems
}

func isNDJSON(resp *http.Response) bool {
	return strings.HasPrefix(resp.Header.Get("Content-Type"), "application/x-ndjson")
}

// asErrors turns validation errors into errors that say where the body
// differs from the schema.
func asErrors(errs []*liberrors.ValidationError) []error {
	var out []error
	for _, e := range errs {
		msg := e.Message
		if e.Reason != "" {
			msg += ": " + e.Reason
		}
		for _, f := range e.SchemaValidationErrors {
			msg += fmt.Sprintf(" [%s: %s]", f.FieldPath, f.Reason)
		}
		out = append(out, errors.New(msg))
	}
	return out
}

// TestSchemaCheckCatchesMismatches proves the check fails where it should,
// with answers made up to differ from the document in one way each.
func TestSchemaCheckCatchesMismatches(t *testing.T) {
	const node = `{"id": "n-1", "name": "a", "machine_id": "m", "data_dir": "/d", "tags": [], "labels": {}, "groups": null,
		"hardware": {"hostname": "h", "os": "linux", "arch": "amd64", "cores": 2, "memory_bytes": 1, "disk_bytes": 1, "gpus": null},
		"status": "online", "agent_state": "idle", "agent_version": "v", "connected": true,
		"registered_at": "2026-01-01T00:00:00Z", "updated_at": "2026-01-01T00:00:00Z"}`
	for _, tc := range []struct {
		name, method, path string
		code               int
		ctype, body        string
		bad                bool
	}{
		{"a node", "GET", "/v1/nodes/a", 200, "application/json", node, false},
		{"a node with a status not in the enum", "GET", "/v1/nodes/a", 200, "application/json", strings.Replace(node, `"online"`, `"lost"`, 1), true},
		{"a node without its status", "GET", "/v1/nodes/a", 200, "application/json", strings.Replace(node, `"status": "online",`, "", 1), true},
		{"a status the operation does not list", "GET", "/v1/nodes/a", 418, "application/json", `{"error": {"code": "invalid", "message": "m"}}`, true},
		{"an error that is no error body", "GET", "/v1/nodes/a", 404, "application/json", `{"message": "gone"}`, true},
		{"an undocumented content type", "GET", "/v1/nodes/a", 200, "text/html", "<p>hi</p>", true},
		{"exec events", "POST", "/v1/deployments/d/exec", 200, "application/x-ndjson", "{\"stream\":\"stdout\",\"data\":\"aGk=\"}\n{\"exit\":0}\n", false},
		{"an exec event of the wrong type", "POST", "/v1/deployments/d/exec", 200, "application/x-ndjson", "{\"stream\":\"stdout\"}\n{\"exit\":\"zero\"}\n", true},
		{"the catch-all 404", "GET", "/v1/nope", 404, "application/json", `{"error": {"code": "not_found", "message": "no endpoint"}}`, false},
		{"an answer to no documented operation", "GET", "/v1/nope", 200, "application/json", `{}`, true},
		{"a method the path does not take", "PUT", "/v1/nodes", 405, "application/json", `{"error": {"code": "invalid", "message": "takes GET"}}`, false},
		{"a method the path does not take, answered 200", "PUT", "/v1/nodes", 200, "application/json", `{"nodes": []}`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := httptest.NewRequest(tc.method, "http://127.0.0.1"+tc.path, nil)
			resp := &http.Response{StatusCode: tc.code, Header: http.Header{"Content-Type": {tc.ctype}}}
			problems := theSchemas().check(req, resp, []byte(tc.body), true)
			if got := len(problems) > 0; got != tc.bad {
				t.Errorf("check(%s %s → %d %s) = %q, want problems: %v", tc.method, tc.path, tc.code, tc.body, problems, tc.bad)
			}
		})
	}
}
