package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/base/httpapi"
	"github.com/nodemgr/nodemgr/internal/base/validate"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
	"github.com/nodemgr/nodemgr/internal/coordinator/template"
	"github.com/nodemgr/nodemgr/internal/drivers/mapping"
	"github.com/nodemgr/nodemgr/internal/drivers/provision"
)

// Templates and mapping sets are YAML documents: the server parses and
// validates them (line, column and field on error) and stores the text as
// written. Reading needs any token; writing needs an admin.

// parseDocument parses and validates a document of a kind, returning its
// parsed form for the wire.
func parseDocument(kind, name string, body []byte) (json.RawMessage, error) {
	switch kind {
	case store.KindTemplate:
		t, err := template.Parse(body, name)
		if err != nil {
			return nil, err
		}
		if t.Name != name {
			return nil, errdefs.Field("name", "the file names template %q, the request %q; make them agree", t.Name, name)
		}
		return json.Marshal(t)
	case store.KindMapping:
		rules, err := mapping.Parse(body, name)
		if err != nil {
			return nil, err
		}
		return json.Marshal(rules)
	}
	return nil, fmt.Errorf("unknown document kind %q", kind)
}

func apiDocument(d store.Document) api.Document {
	parsed, err := parseDocument(d.Kind, d.Name, d.Body)
	if err != nil {
		parsed = json.RawMessage("null") // stored by an older version that accepted it
	}
	return api.Document{Name: d.Name, Version: d.Version, Parsed: parsed, YAML: string(d.Body),
		CreatedAt: d.CreatedAt, UpdatedAt: d.UpdatedAt}
}

func (s *Server) putDocument(w http.ResponseWriter, r *http.Request, kind string) error {
	name := r.PathValue("name")
	if err := validate.Name("name", name); err != nil {
		return err
	}
	if err := principalFrom(r.Context()).RequireAdmin("store a " + kind); err != nil {
		return err
	}
	body, err := httpapi.ReadBody(r, maxBody)
	if err != nil {
		return err
	}
	if _, err := parseDocument(kind, name, body); err != nil {
		return fmt.Errorf("%s %s: %w", kind, name, err)
	}
	d, err := s.store.PutDocument(r.Context(), store.Document{Kind: kind, Name: name, Body: body})
	if err != nil {
		return err
	}
	code := http.StatusOK
	if d.Version == 1 {
		code = http.StatusCreated
	}
	httpapi.WriteJSON(w, code, apiDocument(d))
	return nil
}

func (s *Server) getDocument(w http.ResponseWriter, r *http.Request, kind string) error {
	d, err := s.store.GetDocument(r.Context(), kind, r.PathValue("name"))
	if err != nil {
		if errdefs.IsNotFound(err) {
			return errdefs.NotFound("%s %q (see nodemgr %s ls)", kind, r.PathValue("name"), kind)
		}
		return err
	}
	httpapi.WriteJSON(w, http.StatusOK, apiDocument(d))
	return nil
}

func (s *Server) listDocuments(w http.ResponseWriter, r *http.Request, kind string) error {
	pg, err := readPage(r.URL.Query(), "documents", kind)
	if err != nil {
		return err
	}
	docs, next, err := fillPage(pg, func(sp store.Page) ([]store.Document, error) {
		return s.store.ListDocuments(r.Context(), kind, sp)
	}, store.Document.Cursor, nil)
	if err != nil {
		return err
	}
	out := api.DocumentList{Items: make([]api.Document, 0, len(docs)), Next: next}
	for _, d := range docs {
		out.Items = append(out.Items, apiDocument(d))
	}
	httpapi.WriteJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) deleteDocument(w http.ResponseWriter, r *http.Request, kind string) error {
	if err := principalFrom(r.Context()).RequireAdmin("remove a " + kind); err != nil {
		return err
	}
	name := r.PathValue("name")
	if err := s.store.DeleteDocument(r.Context(), kind, name); err != nil {
		if errdefs.IsNotFound(err) {
			return errdefs.NotFound("%s %q (see nodemgr %s ls)", kind, name, kind)
		}
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) handlePutTemplate(w http.ResponseWriter, r *http.Request) error {
	return s.putDocument(w, r, store.KindTemplate)
}
func (s *Server) handleGetTemplate(w http.ResponseWriter, r *http.Request) error {
	return s.getDocument(w, r, store.KindTemplate)
}
func (s *Server) handleListTemplates(w http.ResponseWriter, r *http.Request) error {
	return s.listDocuments(w, r, store.KindTemplate)
}
func (s *Server) handleDeleteTemplate(w http.ResponseWriter, r *http.Request) error {
	return s.deleteDocument(w, r, store.KindTemplate)
}
func (s *Server) handlePutMapping(w http.ResponseWriter, r *http.Request) error {
	return s.putDocument(w, r, store.KindMapping)
}
func (s *Server) handleGetMapping(w http.ResponseWriter, r *http.Request) error {
	return s.getDocument(w, r, store.KindMapping)
}
func (s *Server) handleListMappings(w http.ResponseWriter, r *http.Request) error {
	return s.listDocuments(w, r, store.KindMapping)
}
func (s *Server) handleDeleteMapping(w http.ResponseWriter, r *http.Request) error {
	return s.deleteDocument(w, r, store.KindMapping)
}

// Render turns a stored template into the Extra map a provider gets,
// applying every stored mapping set in name order.
func (s *Server) Render(ctx context.Context, name, provider string) (api.Rendered, error) {
	if err := mapping.CheckProvider("provider", provider); err != nil {
		return api.Rendered{}, err
	}
	d, err := s.store.GetDocument(ctx, store.KindTemplate, name)
	if err != nil {
		if errdefs.IsNotFound(err) {
			return api.Rendered{}, errdefs.NotFound("template %q (see nodemgr template ls)", name)
		}
		return api.Rendered{}, err
	}
	t, err := template.Parse(d.Body, name)
	if err != nil {
		return api.Rendered{}, fmt.Errorf("stored template %s no longer parses: %w", name, err)
	}
	sets, err := s.store.ListDocuments(ctx, store.KindMapping, store.Page{})
	if err != nil {
		return api.Rendered{}, err
	}
	var rules []mapping.Rule
	out := api.Rendered{Template: name, Provider: provider, Mappings: []string{}}
	for _, set := range sets {
		rs, err := mapping.Parse(set.Body, set.Name)
		if err != nil {
			return api.Rendered{}, fmt.Errorf("stored mapping set %s no longer parses: %w", set.Name, err)
		}
		rules = append(rules, rs...)
		out.Mappings = append(out.Mappings, set.Name)
	}
	extra, steps, err := template.Render(t, provider, rules)
	if err != nil {
		return api.Rendered{}, fmt.Errorf("render %s for %s: %w", name, provider, err)
	}
	out.Extra = extra
	for _, st := range steps {
		out.Steps = append(out.Steps, api.RenderStep{Layer: st.Layer, Matched: st.Matched, Pass: st.Pass,
			Key: st.Key, Value: st.Value, Old: st.Old, Removed: st.Removed, Text: st.String()})
	}
	return out, nil
}

func (s *Server) handleRenderTemplate(w http.ResponseWriter, r *http.Request) error {
	provider := r.URL.Query().Get("provider")
	if provider == "" {
		return errdefs.Field("provider", "required: one of %s", strings.Join(provision.Names(), ", "))
	}
	out, err := s.Render(r.Context(), r.PathValue("name"), provider)
	if err != nil {
		return err
	}
	httpapi.WriteJSON(w, http.StatusOK, out)
	return nil
}
