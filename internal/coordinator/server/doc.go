// Package server is the nodemgr coordinator: the REST API under /v1, the
// agents' WebSocket endpoint, and the loops that keep the node view true
// (heartbeat batching, offline detection with confirmation, the durable
// notification outbox). All state lives in a store.Store; the server itself
// keeps only what belongs to live connections, so replicas can follow.
//
// Errors from the layers below are errdefs classes; writeError maps them to
// HTTP status codes in one place.
package server
