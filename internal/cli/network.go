package cli

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/client"
)

func newNetworkCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "network",
		Short: "Show the overlay network between nodes",
		Long: `The overlay network is the WireGuard mesh that agents started with
--overlay form: each node gets a /24 block of the server's
--overlay-network (100.64.0.0/10 by default) and is meshed with the nodes
that share a group with it, and with no other. Traffic between blocks
leaves a node only inside WireGuard.`,
	}
	show := nodeView(e, "show NODE", "Show a node's overlay device and each peer's endpoint, last handshake and bytes", 0,
		func(ctx context.Context, c *client.Client, node string, _ []string) (api.OverlayDevice, error) {
			return c.Overlay(ctx, node)
		}, printOverlayDevice)
	workloadFlags(show)
	cmd.AddCommand(networkLsCmd(e), show)
	return cmd
}

func networkLsCmd(e *env) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "ls",
		Short: "List the nodes on the overlay: address, block, endpoint and peers",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			list, err := clientFor(cmd, e).Network(cmd.Context())
			if err != nil {
				return err
			}
			return output(e, asJSON, list, printOverlayList)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func printOverlayList(e *env, list api.OverlayList) {
	if len(list.Nodes) == 0 {
		fmt.Fprintf(e.stdout, "No node is on the overlay %s: start agents with --overlay.\n", list.Network)
		return
	}
	t := newTable(e.stdout, "NODE", "STATUS", "ADDRESS", "BLOCK", "ENDPOINT", "KIND", "PEERS")
	for _, n := range list.Nodes {
		t.row(n.Node, n.Status, strings.TrimSuffix(n.Address, "/32"), n.Block, n.Endpoint, n.Kind, orDash(strings.Join(n.Peers, ",")))
	}
	t.flush()
}

func printOverlayDevice(e *env, d api.OverlayDevice) {
	fmt.Fprintf(e.stdout, "%s (%s WireGuard), listening on UDP %d, key %s\n", d.Interface, d.Kind, d.ListenPort, d.PublicKey)
	if d.State != nil {
		fmt.Fprintf(e.stdout, "address %s, block %s of %s\n", strings.TrimSuffix(d.State.Address, "/32"), d.State.Block, d.State.Network)
		if d.DNS != "" {
			fmt.Fprintf(e.stdout, "names (%d) answered at %s\n", len(d.State.Names), d.DNS)
		}
	} else {
		fmt.Fprintln(e.stdout, "no state from the server yet")
	}
	if len(d.Links) == 0 {
		fmt.Fprintln(e.stdout, "No peers: no other node on the overlay shares a group with this one.")
		return
	}
	fmt.Fprintln(e.stdout)
	now := time.Now()
	t := newTable(e.stdout, "PEER", "ENDPOINT", "ALLOWED IPS", "HANDSHAKE", "RECEIVED", "SENT")
	for _, l := range d.Links {
		t.row(orDash(l.Node), orDash(l.Endpoint), strings.Join(l.AllowedIPs, ","), ago(l.LastHandshake, now),
			sizeString(l.RxBytes), sizeString(l.TxBytes))
	}
	t.flush()
}
