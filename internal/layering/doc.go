// Package layering holds no code: its test keeps the architecture's layers
// apart (the agent never imports server code; stores never import HTTP
// handlers; the public api package imports only the standard library; the
// agent-only build, -tags agentonly, links no server or driver code).
package layering
