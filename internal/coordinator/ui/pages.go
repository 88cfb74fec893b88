package ui

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"sort"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/auth"
	"github.com/nodemgr/nodemgr/internal/drivers/provision"
)

// pageSize is the rows a list page shows: small enough that a page stays
// far under 200 KB with long names, large enough to scan.
const pageSize = 50

// pager is a list page's paging: the API's cursor, kept in the query.
type pager struct {
	Next  string // the next page's link; empty on the last
	First string // the first page's link; empty on the first
}

// makePager builds the links of a list page from the API's next cursor.
func makePager(r *http.Request, next string) pager {
	var p pager
	q := r.URL.Query()
	if q.Get("after") != "" {
		q.Del("after")
		p.First = r.URL.Path + "?" + q.Encode()
	}
	if next != "" {
		q.Set("after", next)
		p.Next = r.URL.Path + "?" + q.Encode()
	}
	return p
}

// listQuery is the API query of a list page: its filters, the page size
// and the cursor, passed through (the API checks them and says what is
// wrong).
func listQuery(r *http.Request, filters ...string) url.Values {
	q := url.Values{"limit": {itoa(pageSize)}}
	for _, f := range filters {
		if v := r.URL.Query().Get(f); v != "" {
			q.Set(f, v)
		}
	}
	if a := r.URL.Query().Get("after"); a != "" {
		q.Set("after", a)
	}
	return q
}

// listData is what a list page shows: one page of items, the filter
// it was asked for (a status, a state; "" for all), and the pager.
type listData[T any] struct {
	Items  []T
	Filter string
	Pager  pager
}

// listPage is a page that lists one page of the API's list at path,
// filtered by the query parameter filter when it is not "" (and the
// request names one); items takes the rows and the next cursor out of
// the API's answer.
func listPage[L, T any](page, title, path, filter string, items func(L) ([]T, string)) func(context.Context, *http.Request, *view) error {
	return func(ctx context.Context, r *http.Request, v *view) error {
		v.Page, v.Title, v.Nav = page, title, page
		d := &listData[T]{}
		var filters []string
		if filter != "" {
			d.Filter = r.URL.Query().Get(filter)
			filters = append(filters, filter)
		}
		v.Data = d
		var l L
		if err := v.c.get(ctx, path, listQuery(r, filters...), &l); err != nil {
			return err
		}
		var next string
		d.Items, next = items(l)
		d.Pager = makePager(r, next)
		return nil
	}
}

func (v *view) principal() auth.Principal {
	return auth.Principal{User: v.User.Name, Admin: v.User.Admin, Groups: v.User.Groups}
}

// can says whether the user holds role in one of groups: the same rule as
// the API's, used only to hide buttons the API would refuse.
func (v *view) can(role string, groups []string) bool { return v.principal().Can(role, groups) }

// canStop mirrors the API's rule for closing and cancelling a suite or
// its tasks: the owner, or Write in its group.
func (v *view) canStop(s api.Suite) bool {
	if s.Owner == v.User.Name {
		return true
	}
	if s.Group == "" {
		return v.User.Admin
	}
	return v.can(api.RoleWrite, []string{s.Group})
}

// ---- overview

// overviewSuites is how many Open, and how many Closed, suites the
// overview lists.
const overviewSuites = 20

type overviewData struct {
	Nodes     map[string]int
	NodesMore bool // counted from the first page only (not an admin)
	Suites    map[string]int
	Tasks     api.TaskCounts
	HaveTasks bool
	Rate      float64
	HaveRate  bool
	Running   []api.Suite
	Pools     []api.Pool
	Scaling   int
	NodeTotal int
	OnlinePct int
	// LiveSuites counts the Open and Closed suites; LiveMore says it is
	// counted from the rows listed only (not an admin), and there are more.
	LiveSuites int
	LiveMore   bool
}

func (u *UI) overview(ctx context.Context, r *http.Request, v *view) error {
	v.Page, v.Title, v.Nav = "overview", "Overview", "overview"
	d := &overviewData{}
	v.Data = d
	if v.Admin() {
		var sum api.Summary
		if err := v.c.get(ctx, "/v1/summary", nil, &sum); err != nil {
			return err
		}
		d.Nodes, d.Suites, d.Tasks, d.HaveTasks = sum.Nodes, sum.Suites, sum.Tasks, true
	} else {
		var nl api.NodeList
		if err := v.c.get(ctx, "/v1/nodes", url.Values{"limit": {"1000"}}, &nl); err != nil {
			return err
		}
		d.Nodes, d.NodesMore = map[string]int{}, nl.Next != ""
		for _, n := range nl.Nodes {
			d.Nodes[n.Status]++
		}
	}
	for _, n := range d.Nodes {
		d.NodeTotal += n
	}
	if d.NodeTotal > 0 {
		d.OnlinePct = d.Nodes[api.StatusOnline] * 100 / d.NodeTotal
	}
	for _, st := range []string{api.SuiteOpen, api.SuiteClosed} {
		var sl api.SuiteList
		if err := v.c.get(ctx, "/v1/suites", url.Values{"state": {st}, "limit": {itoa(overviewSuites)}}, &sl); err != nil {
			return err
		}
		d.Running = append(d.Running, sl.Suites...)
	}
	sort.Slice(d.Running, func(i, j int) bool { return d.Running[i].CreatedAt.After(d.Running[j].CreatedAt) })
	if d.Suites != nil {
		d.LiveSuites = d.Suites[api.SuiteOpen] + d.Suites[api.SuiteClosed]
	} else {
		d.LiveSuites, d.LiveMore = len(d.Running), len(d.Running) >= 2*overviewSuites
	}
	d.Rate, d.HaveRate = v.s.feed.rate()
	if v.Admin() {
		var pl api.PoolList
		if err := v.c.get(ctx, "/v1/pools", url.Values{"limit": {"50"}}, &pl); err != nil {
			return err
		}
		d.Pools = pl.Pools
		for _, p := range pl.Pools {
			if scaling(p) {
				d.Scaling++
			}
		}
	}
	return nil
}

// scaling says a pool is between sizes: machines on their way up or down.
func scaling(p api.Pool) bool {
	ready := p.Machines["ready"] + p.Machines["busy"] + p.Machines["idle"]
	live := 0
	for st, n := range p.Machines {
		if st != "gone" && st != "failed" {
			live += n
		}
	}
	return live != ready || live != p.Desired
}

// ---- nodes

var nodesPage = listPage("nodes", "Nodes", "/v1/nodes", "status",
	func(l api.NodeList) ([]api.Node, string) { return l.Nodes, l.Next })

type nodeData struct {
	Node          api.Node
	Books         *api.NodeResources
	BooksError    string
	Usage         []api.UsageSample
	CPUChart      chart
	MemChart      chart
	Services      []api.Service
	ServicesError string
	Containers    []api.Container
	CanShutdown   bool
	CanWrite      bool
}

func (u *UI) nodePage(ctx context.Context, r *http.Request, v *view) error {
	v.Page, v.Nav = "node", "nodes"
	d := &nodeData{}
	v.Data = d
	id := r.PathValue("node")
	v.Title = id
	if err := v.c.get(ctx, "/v1/nodes/"+esc(id), nil, &d.Node); err != nil {
		return err
	}
	n := d.Node
	v.Title = n.Name
	d.CanShutdown = v.can(api.RoleAdmin, n.Groups)
	d.CanWrite = v.can(api.RoleWrite, n.Groups)
	var books api.NodeResources
	if err := v.c.get(ctx, "/v1/nodes/"+esc(n.ID)+"/resources", nil, &books); err != nil {
		d.BooksError = err.Error()
	} else {
		d.Books = &books
	}
	var uh api.UsageHistory
	if err := v.c.get(ctx, "/v1/nodes/"+esc(n.ID)+"/usage", nil, &uh); err == nil {
		d.Usage = uh.Samples
	}
	memMB := float64(n.Hardware.MemoryBytes >> 20)
	d.CPUChart = makeChart(d.Usage, func(s api.UsageSample) float64 { return s.CPUPercent }, 100, "%")
	d.MemChart = makeChart(d.Usage, func(s api.UsageSample) float64 { return float64(s.MemoryUsedMB) }, memMB, " MB")
	if n.Connected {
		var raw json.RawMessage
		err := v.c.get(ctx, "/v1/nodes/"+esc(n.ID)+"/services", nil, &raw)
		if err == nil {
			d.Services, err = api.DecodeList[api.Service](raw, "services")
		}
		if err != nil {
			d.ServicesError = err.Error()
		}
	}
	// Ended jobs too: a job that failed at once is what the page is
	// opened for. The live ones first.
	var cl api.ContainerList
	if err := v.c.get(ctx, "/v1/containers", url.Values{"node": {n.ID}, "all": {"true"}, "limit": {"100"}}, &cl); err == nil {
		d.Containers = cl.Containers
		slices.SortStableFunc(d.Containers, func(a, b api.Container) int {
			return cmp.Compare(b2i(api.ContainerFinal(a.Status)), b2i(api.ContainerFinal(b.Status)))
		})
	}
	return nil
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// ---- suites

var suitesPage = listPage("suites", "Suites", "/v1/suites", "state",
	func(l api.SuiteList) ([]api.Suite, string) { return l.Suites, l.Next })

type suiteData struct {
	Suite   api.Suite
	Tasks   []api.Task
	State   string // the tasks' filter
	Name    string
	Pager   pager
	CanStop bool
	Live    bool // it still moves
	Percent int
	Ended   int
	AvgRate string     // tasks ended per second from creation to the last change
	Failed  []api.Task // the first few failed tasks, for the failures card
}

func (u *UI) suitePage(ctx context.Context, r *http.Request, v *view) error {
	v.Page, v.Nav = "suite", "suites"
	q := r.URL.Query()
	d := &suiteData{State: q.Get("state"), Name: q.Get("name")}
	v.Data = d
	id := r.PathValue("suite")
	v.Title = id
	if err := v.c.get(ctx, "/v1/suites/"+esc(id), nil, &d.Suite); err != nil {
		return err
	}
	s := d.Suite
	v.Title = s.Name
	d.CanStop = v.canStop(s)
	d.Live = s.State == api.SuiteOpen || s.State == api.SuiteClosed
	se := suiteOf(s)
	d.Percent, d.Ended = se.Percent, se.Counts.Finished+se.Counts.Failed+se.Counts.Cancelled
	var tl api.TaskList
	if err := v.c.get(ctx, "/v1/suites/"+esc(s.ID)+"/tasks", listQuery(r, "state", "name"), &tl); err != nil {
		return err
	}
	d.Tasks, d.Pager = tl.Tasks, makePager(r, tl.Next)
	if secs := s.UpdatedAt.Sub(s.CreatedAt).Seconds(); secs > 0 && d.Ended > 0 {
		d.AvgRate = fmt.Sprintf("%.1f tasks/s on average", float64(d.Ended)/secs)
	}
	if s.Counts.Failed > 0 {
		var fl api.TaskList
		q := url.Values{"state": {api.TaskFailed}, "limit": {"5"}}
		if err := v.c.get(ctx, "/v1/suites/"+esc(s.ID)+"/tasks", q, &fl); err == nil {
			d.Failed = fl.Tasks
		}
	}
	return nil
}

// attempt is one run of a task as the task page shows it.
type attempt struct {
	N        int
	Node     string
	ExitCode int
	Signal   string
	Reason   string
	Duration int64 // ms; -1 unknown
	Stdout   string
	Stderr   string
	Log      *api.TaskLog // its whole output, when kept apart from the tails
	At       string
	OK       bool
}

type taskData struct {
	Task     api.Task
	Suite    api.Suite
	Attempts []attempt
	CanStop  bool
	Final    bool
}

func (u *UI) taskPage(ctx context.Context, r *http.Request, v *view) error {
	v.Page, v.Nav = "task", "suites"
	d := &taskData{}
	v.Data = d
	id := r.PathValue("task")
	v.Title = id
	if err := v.c.get(ctx, "/v1/tasks/"+esc(id), nil, &d.Task); err != nil {
		return err
	}
	t := d.Task
	if t.Name != "" {
		v.Title = t.Name
	}
	if err := v.c.get(ctx, "/v1/suites/"+esc(t.SuiteID), nil, &d.Suite); err != nil {
		return err
	}
	d.CanStop = v.canStop(d.Suite)
	d.Final = slices.Contains([]string{api.TaskFinished, api.TaskFailed, api.TaskCancelled}, t.State)
	d.Attempts = attemptsOf(t)
	return nil
}

// attemptsOf lists a task's attempts, newest first: each failure, then the
// result of the last one when it differs from the last failure.
func attemptsOf(t api.Task) []attempt {
	var out []attempt
	for _, f := range t.Failures {
		out = append(out, attempt{N: f.Attempt, Node: f.NodeID, ExitCode: f.ExitCode, Signal: f.Signal,
			Reason: f.Reason, Duration: -1, Stdout: f.Stdout, Stderr: f.Stderr, Log: f.Log, At: f.At.Format("2006-01-02 15:04:05")})
	}
	if res := t.Result; res != nil {
		last := len(t.Failures) > 0 && t.Failures[len(t.Failures)-1].Attempt == t.Attempt
		if !last {
			out = append(out, attempt{N: t.Attempt, Node: res.NodeID, ExitCode: res.ExitCode, Signal: res.Signal,
				Duration: res.DurationMS, Stdout: res.Stdout, Stderr: res.Stderr, Log: res.Log,
				At: res.FinishedAt.Format("2006-01-02 15:04:05"), OK: res.ExitCode == 0 && res.Signal == ""})
		} else {
			out[len(out)-1].Duration = res.DurationMS
		}
	}
	slices.Reverse(out)
	return out
}

// ---- deployments and pools

var deploymentsPage = listPage("deployments", "Deployments", "/v1/deployments", "",
	func(l api.DeploymentList) ([]api.Deployment, string) { return l.Deployments, l.Next })

var poolsPage = listPage("pools", "Pools", "/v1/pools", "",
	func(l api.PoolList) ([]api.Pool, string) { return l.Pools, l.Next })

type poolData struct {
	Pool   api.PoolDetail
	Events []api.PoolEvent
	Pager  pager
}

func (u *UI) poolPage(ctx context.Context, r *http.Request, v *view) error {
	v.Page, v.Nav = "pool", "pools"
	d := &poolData{}
	v.Data = d
	name := r.PathValue("pool")
	v.Title = name
	if err := v.c.get(ctx, "/v1/pools/"+esc(name), nil, &d.Pool); err != nil {
		return err
	}
	var el api.PoolEventList
	if err := v.c.get(ctx, "/v1/pools/"+esc(name)+"/events", listQuery(r), &el); err != nil {
		return err
	}
	d.Events, d.Pager = el.Events, makePager(r, el.Next)
	return nil
}

// ---- templates and mappings

type docsData struct {
	Kind  string // templates | mappings
	Items []api.Document
	Pager pager
}

func (u *UI) docsPage(ctx context.Context, r *http.Request, v *view, kind string) error {
	v.Page, v.Nav = "documents", kind
	v.Title = map[string]string{"templates": "Templates", "mappings": "Mappings"}[kind]
	d := &docsData{Kind: kind}
	v.Data = d
	var dl api.DocumentList
	if err := v.c.get(ctx, "/v1/"+kind, listQuery(r), &dl); err != nil {
		return err
	}
	d.Items, d.Pager = dl.Items, makePager(r, dl.Next)
	return nil
}

func (u *UI) templatesPage(ctx context.Context, r *http.Request, v *view) error {
	return u.docsPage(ctx, r, v, "templates")
}

func (u *UI) mappingsPage(ctx context.Context, r *http.Request, v *view) error {
	return u.docsPage(ctx, r, v, "mappings")
}

type rendering struct {
	Provider string
	Rendered *api.Rendered
	Error    string
}

type docData struct {
	Kind    string
	Doc     api.Document
	Renders []rendering
	UsedBy  []mappingUse // a mapping's: the templates it changes, per provider
	More    bool         // more templates than were looked at
}

// mappingUse is a template a mapping set takes part in rendering.
type mappingUse struct {
	Template  string
	Providers []string
}

// mappingTemplates is how many templates a mapping's page renders to find
// those it applies to: 4 renderings each, all in-process.
const mappingTemplates = 25

func (u *UI) templatePage(ctx context.Context, r *http.Request, v *view) error {
	d, err := u.docPage(ctx, r, v, "templates")
	if err != nil {
		return err
	}
	for _, p := range provision.Names() {
		var rd api.Rendered
		err := v.c.get(ctx, "/v1/templates/"+esc(d.Doc.Name)+"/render", url.Values{"provider": {p}}, &rd)
		if err != nil {
			d.Renders = append(d.Renders, rendering{Provider: p, Error: err.Error()})
			continue
		}
		d.Renders = append(d.Renders, rendering{Provider: p, Rendered: &rd})
	}
	return nil
}

func (u *UI) mappingPage(ctx context.Context, r *http.Request, v *view) error {
	d, err := u.docPage(ctx, r, v, "mappings")
	if err != nil {
		return err
	}
	var tl api.DocumentList
	if err := v.c.get(ctx, "/v1/templates", url.Values{"limit": {itoa(mappingTemplates)}}, &tl); err != nil {
		return err
	}
	d.More = tl.Next != ""
	for _, t := range tl.Items {
		use := mappingUse{Template: t.Name}
		for _, p := range provision.Names() {
			var rd api.Rendered
			err := v.c.get(ctx, "/v1/templates/"+esc(t.Name)+"/render", url.Values{"provider": {p}}, &rd)
			if err == nil && slices.Contains(rd.Mappings, d.Doc.Name) {
				use.Providers = append(use.Providers, p)
			}
		}
		if len(use.Providers) > 0 {
			d.UsedBy = append(d.UsedBy, use)
		}
	}
	return nil
}

func (u *UI) docPage(ctx context.Context, r *http.Request, v *view, kind string) (*docData, error) {
	v.Page, v.Nav = "document", kind
	d := &docData{Kind: kind}
	v.Data = d
	name := r.PathValue("name")
	v.Title = name
	return d, v.c.get(ctx, "/v1/"+kind+"/"+esc(name), nil, &d.Doc)
}

// ---- ensembles

type ensemblesData struct {
	Items []api.Ensemble
	All   bool // shut down and failed ones too
}

func (u *UI) ensemblesPage(ctx context.Context, r *http.Request, v *view) error {
	v.Page, v.Title, v.Nav = "ensembles", "Ensembles", "ensembles"
	d := &ensemblesData{All: r.URL.Query().Get("all") == "true"}
	v.Data = d
	q := url.Values{}
	if d.All {
		q.Set("all", "true")
	}
	var l api.EnsembleList
	if err := v.c.get(ctx, "/v1/ensembles", q, &l); err != nil {
		return err
	}
	d.Items = l.Ensembles
	return nil
}

type ensembleData struct {
	E api.Ensemble
	// Specs are the allocations' specs by name, for their resources and
	// placement beside their state.
	Specs map[string]api.AllocationSpec
}

func (u *UI) ensemblePage(ctx context.Context, r *http.Request, v *view) error {
	v.Page, v.Nav = "ensemble", "ensembles"
	d := &ensembleData{}
	v.Data = d
	v.Title = r.PathValue("ensemble")
	if err := v.c.get(ctx, "/v1/ensembles/"+esc(r.PathValue("ensemble")), nil, &d.E); err != nil {
		return err
	}
	v.Title = d.E.Name
	d.Specs = make(map[string]api.AllocationSpec, len(d.E.Spec.Allocations))
	for _, a := range d.E.Spec.Allocations {
		d.Specs[a.Name] = a
	}
	return nil
}
