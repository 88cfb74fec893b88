package cli

import "github.com/spf13/cobra"

func newBenchCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{Use: "bench", Short: "Load harnesses that measure nodemgr on this machine"}
	return cmd
}
