// Package api holds nodemgr's wire types: the JSON bodies of the REST API under
// /v1 and the messages of the agent ↔ server WebSocket protocol. It is imported
// by the server, the agent, the CLI and by users' own programs (see client), so
// it depends on nothing but the standard library.
package api
