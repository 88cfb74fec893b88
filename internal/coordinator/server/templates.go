package server

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/base/httpapi"
	"github.com/nodemgr/nodemgr/internal/base/paging"
	"github.com/nodemgr/nodemgr/internal/base/validate"
	"github.com/nodemgr/nodemgr/internal/coordinator/catalog"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
	"github.com/nodemgr/nodemgr/internal/drivers/provision"
)

// Templates and mapping sets are YAML documents: the catalog parses and
// validates them (line, column and field on error) and the store keeps
// the text as written. Reading needs any token; writing needs an admin.

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
	if _, err := catalog.ParseDocument(kind, name, body); err != nil {
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
	httpapi.WriteJSON(w, code, catalog.APIDocument(d))
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
	httpapi.WriteJSON(w, http.StatusOK, catalog.APIDocument(d))
	return nil
}

func (s *Server) listDocuments(w http.ResponseWriter, r *http.Request, kind string) error {
	pg, err := paging.Read(r.URL.Query(), "documents", kind)
	if err != nil {
		return err
	}
	docs, next, err := paging.Fill(pg, func(sp store.Page) ([]store.Document, error) {
		return s.store.ListDocuments(r.Context(), kind, sp)
	}, store.Document.Cursor, nil)
	if err != nil {
		return err
	}
	items := make([]api.Document, 0, len(docs))
	for _, d := range docs {
		items = append(items, catalog.APIDocument(d))
	}
	httpapi.WriteJSON(w, http.StatusOK, api.DocumentPage(kind+"s", items, next))
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

// documentRoutes are the routes of one kind of document under path.
func (s *Server) documentRoutes(path, kind string) []route {
	return []route{
		{"GET", path, authAdmin, withKind(s.listDocuments, kind)},
		{"GET", path + "/{name}", authAdmin, withKind(s.getDocument, kind)},
		{"PUT", path + "/{name}", authAdmin, withKind(s.putDocument, kind)},
		{"DELETE", path + "/{name}", authAdmin, withKind(s.deleteDocument, kind)},
	}
}

func (s *Server) handleRenderTemplate(w http.ResponseWriter, r *http.Request) error {
	provider := r.URL.Query().Get("provider")
	if provider == "" {
		return errdefs.Field("provider", "required: one of %s", strings.Join(provision.Names(), ", "))
	}
	out, err := s.catalog.Render(r.Context(), r.PathValue("name"), provider)
	return answer(w, http.StatusOK, out, err)
}
