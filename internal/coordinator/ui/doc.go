// Package ui is nodemgr's web dashboard, served by the server under /ui/.
//
// It renders pages on the server with html/template, plus a little
// JavaScript and CSS, all embedded: go build is the whole build. It holds no
// data of its own and does not import the server or the store: every page
// and every action is a request to the server's own API handler, made
// in-process with the session's API token, so a page shows what the token's
// roles allow and an action succeeds exactly when the API allows it.
//
// A user logs in with an API token, which becomes a random session id in an
// HttpOnly, SameSite=Strict cookie (sessions live in this process's memory);
// every POST carries the session's CSRF token. One Server-Sent Events stream
// per tab (/ui/events) tells pages what changed, from a per-session poll of
// the API, with ids a dropped stream resumes from (Last-Event-ID).
package ui
