// Package proto is the session layer of the agent ↔ server WebSocket protocol,
// shared by both ends.
//
// A Conn carries api.Frame values: NewWebSocketConn in production, Pipe in
// tests. A Peer runs on top of a Conn and gives each side the same two
// services:
//
//   - Requests (Call / Handler.HandleRequest) are multiplexed by a per-peer
//     request id and answered concurrently, so a slow handler does not hold up
//     the others. Errors keep their errdefs class across the wire.
//   - Notifications (Notify / Handler.HandleNotify) carry a sequence number
//     chosen by the sender, are handled one at a time in order, and are
//     acknowledged cumulatively. The sender keeps what is not acknowledged and
//     replays it after a reconnect; the receiver skips seqs it has already
//     handled (Options.LastSeq), so a replay is harmless.
//
// The package knows nothing about methods: the server and the agent each
// bring a Handler. Reconnecting, authentication and persisting LastSeq are the
// callers' business.
package proto
