// Package overlay is the agent's side of the WireGuard mesh between nodes.
//
// The server allocates each node a block of overlay addresses (say
// 100.64.3.0/24) and sends the agent, over its session, a State: the node's
// own overlay address and every peer it should reach, with the peer's public
// key, endpoint and blocks. The whole set comes every time; Mesh.Apply
// converges the node's WireGuard device, its address and its routes on it,
// touching only what differs, so a repeated Apply is cheap and a crash at any
// point is healed by the next one.
//
// The private key is made on the node, kept in a 0600 file, and never leaves
// it: only the public key goes to the server.
//
// The device is the kernel's WireGuard where the kernel has it, else
// wireguard-go running in this process on a TUN link. Both are driven in
// process (netlink for the kernel, IpcSet and IpcGet for wireguard-go), never
// through the UAPI socket under /var/run/wireguard, which is not per network
// namespace. Linux only; elsewhere New returns errors.ErrUnsupported.
package overlay
