// Package layering holds no code: its test keeps the architecture's layers
// apart (the agent never imports server code; stores never import HTTP
// handlers; the public api package imports only the standard library).
package layering
