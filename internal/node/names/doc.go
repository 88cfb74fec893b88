// Package names is the DNS server each agent runs so that workloads find
// ensemble replicas by stable names.
//
// A replica's name stays valid when it is restored elsewhere or moved:
// web.shop.nodemgr names every replica of allocation web of ensemble shop,
// and 1.web.shop.nodemgr replica 1 alone. The server computes the whole
// table of names and addresses from the ensembles and pushes it to every
// agent over the agent's session on each change; the agent hands it to
// Server.Set, which swaps it in atomically, and the agent's local API reads
// it back with Lookup.
//
// Containers on the overlay (see package overlay) use this server as their
// only resolver, at the node's overlay address. It answers names under Zone
// from the table, authoritatively and with a short TTL since a restore moves
// a replica, and forwards every other name to the node's own upstream
// resolvers (Config.Upstream, else those of /etc/resolv.conf), over UDP and
// then TCP when the answer is truncated.
package names
