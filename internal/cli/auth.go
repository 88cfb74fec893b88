package cli

import (
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/client"
	"github.com/nodemgr/nodemgr/internal/base/validate"
)

func newWhoamiCmd(e *env) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "whoami",
		Short: "Show the user the token belongs to",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			u, err := clientFor(cmd, e).Whoami(cmd.Context())
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(e.stdout, u)
			}
			fmt.Fprintf(e.stdout, "%s (admin: %v, groups: %s)\n", u.Name, u.Admin, orDash(roleString(u.Groups)))
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func roleString(g map[string]string) string {
	keys := slices.Sorted(maps.Keys(g))
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + ":" + g[k]
	}
	return strings.Join(parts, ", ")
}

// tokenList is a page of tokens as the API answers it, for --json.
func tokenList(tokens []api.Token, next string) any { return api.TokenList{Tokens: tokens, Next: next} }

func printTokens(e *env, tokens []api.Token) error {
	now := time.Now()
	t := newTable(e.stdout, "ID", "NAME", "USER", "CREATED", "EXPIRES", "LAST USED")
	for _, tk := range tokens {
		t.row(tk.ID, orDash(tk.Name), orDash(tk.User), tk.CreatedAt.Format(time.RFC3339), expires(tk.ExpiresAt, now), ago(tk.LastUsed, now))
	}
	return t.flush()
}

// printJoinTokens lists join tokens with what tells them apart: the
// groups they admit nodes into, their uses, and the node a re-join token
// is bound to.
func printJoinTokens(e *env, tokens []api.Token) error {
	now := time.Now()
	t := newTable(e.stdout, "ID", "NAME", "GROUPS", "USES", "NODE", "CREATED", "EXPIRES", "LAST USED")
	for _, tk := range tokens {
		t.row(tk.ID, orDash(tk.Name), orDash(strings.Join(tk.Groups, ",")), usesString(tk), orDash(tk.NodeID),
			tk.CreatedAt.Format(time.RFC3339), expires(tk.ExpiresAt, now), ago(tk.LastUsed, now))
	}
	return t.flush()
}

// usesString is a join token's uses out of its maximum: "1/10", "3/unlimited".
func usesString(tk api.Token) string {
	if tk.MaxUses == 0 {
		return fmt.Sprintf("%d/unlimited", tk.Uses)
	}
	return fmt.Sprintf("%d/%d", tk.Uses, tk.MaxUses)
}

func printNewToken(e *env, tk api.Token, asJSON bool, what string) error {
	if asJSON {
		return printJSON(e.stdout, tk)
	}
	banner := fmt.Sprintf("Created %s %s (expires %s). The secret is shown only now", what, tk.ID, expires(tk.ExpiresAt, time.Now()))
	if !isTerminal(e.rawStdout) {
		// Saved to a file or piped on: the secret alone, so the file is a
		// token file as it is; the banner goes to the person.
		fmt.Fprintf(e.stderr, "%s; it went to standard output.\n", banner)
		fmt.Fprintln(e.stdout, tk.Secret)
		return nil
	}
	fmt.Fprintf(e.stdout, "%s:\n\n%s\n", banner, tk.Secret)
	return nil
}

// isTerminal reports whether w is a terminal (a character device).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

func newTokenCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{Use: "token", Short: "Manage API tokens"}
	var req api.CreateTokenRequest
	var asJSON bool
	create := &cobra.Command{
		Use:   "create",
		Short: "Create an API token (for yourself, or --user as an admin)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			tk, err := clientFor(cmd, e).CreateToken(cmd.Context(), req)
			if err != nil {
				return err
			}
			return printNewToken(e, tk, asJSON, "API token")
		},
	}
	create.Flags().StringVar(&req.Name, "name", "", "what the token is for")
	create.Flags().StringVar(&req.User, "user", "", "whose token (admins only; default you)")
	create.Flags().StringVar(&req.TTL, "ttl", "", "lifetime, e.g. 720h (default 90 days)")
	create.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	ls := lsCmd(e, &cobra.Command{Use: "ls", Short: "List API tokens", Args: cobra.NoArgs}, "all",
		(*client.Client).TokensPage, tokenList, printTokens)
	rm := &cobra.Command{
		Use: "rm TOKEN_ID", Short: "Revoke an API token", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := clientFor(cmd, e).DeleteToken(cmd.Context(), args[0]); err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "revoked %s\n", args[0])
			return nil
		},
	}
	var rotJSON bool
	rotate := &cobra.Command{
		Use:   "rotate TOKEN_ID",
		Short: "Replace an API token with a new secret (same name, user and lifetime) and revoke the old one",
		Long: `Replace an API token with a new secret and revoke the old one at once.
Rotating the server's first admin token also rewrites DATA_DIR/admin-token.
Tokens live at most the server's --max-token-ttl (365 days by default):
rotate long-lived ones before they expire.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			tk, err := clientFor(cmd, e).RotateToken(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return printNewToken(e, tk, rotJSON, "API token")
		},
	}
	rotate.Flags().BoolVar(&rotJSON, "json", false, "print JSON")
	cmd.AddCommand(create, ls, rm, rotate)
	return cmd
}

func newJoinTokenCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{Use: "join-token", Short: "Manage join tokens that let agents register"}
	var req api.CreateTokenRequest
	var asJSON bool
	create := &cobra.Command{
		Use:   "create",
		Short: "Create a join token; pass it to `nodemgr agent --join-token-file` (or NODEMGR_JOIN_TOKEN)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			tk, err := clientFor(cmd, e).CreateJoinToken(cmd.Context(), req)
			if err != nil {
				return err
			}
			return printNewToken(e, tk, asJSON, "join token")
		},
	}
	create.Flags().StringVar(&req.Name, "name", "", "what the token is for")
	create.Flags().StringSliceVar(&req.Groups, "group", nil, "groups the registering nodes join (repeatable)")
	create.Flags().IntVar(&req.MaxUses, "max-uses", 0, "registrations allowed (0: unlimited; 1 with --node)")
	create.Flags().StringVar(&req.Node, "node", "", "bind the token to this existing node so its agent can re-join it after losing its credential (admins only)")
	create.Flags().StringVar(&req.TTL, "ttl", "", "lifetime, e.g. 24h (default 24h)")
	create.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	ls := lsCmd(e, &cobra.Command{Use: "ls", Short: "List join tokens: the groups they admit nodes into, their uses, the node a re-join token is bound to", Args: cobra.NoArgs}, "all",
		(*client.Client).JoinTokensPage, tokenList, printJoinTokens)
	rm := &cobra.Command{
		Use: "rm TOKEN_ID", Short: "Revoke a join token", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := clientFor(cmd, e).DeleteJoinToken(cmd.Context(), args[0]); err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "revoked %s\n", args[0])
			return nil
		},
	}
	cmd.AddCommand(create, ls, rm)
	return cmd
}

func newUserCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{Use: "user", Short: "Manage users and their roles in groups"}
	var admin bool
	var groups []string
	create := &cobra.Command{
		Use:   "create NAME [--group GROUP=ROLE]... [--admin]",
		Short: "Create a user; then `nodemgr token create --user NAME` gives them a token",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			roles, err := validate.KeyValues("--group", groups)
			if err != nil {
				return err
			}
			u, err := clientFor(cmd, e).CreateUser(cmd.Context(), api.CreateUserRequest{Name: args[0], Admin: admin, Groups: roles})
			if err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "created user %s (groups: %s)\n", u.Name, orDash(roleString(u.Groups)))
			return nil
		},
	}
	create.Flags().BoolVar(&admin, "admin", false, "make the user a superuser")
	create.Flags().StringSliceVar(&groups, "group", nil, "GROUP=ROLE with ROLE Read, Write or Admin (repeatable)")
	ls := lsCmd(e, &cobra.Command{Use: "ls", Short: "List users", Args: cobra.NoArgs}, "all",
		(*client.Client).UsersPage,
		func(users []api.User, next string) any { return api.UserList{Users: users, Next: next} },
		func(e *env, users []api.User) error {
			t := newTable(e.stdout, "NAME", "ADMIN", "GROUPS", "CREATED")
			for _, u := range users {
				t.row(u.Name, fmt.Sprint(u.Admin), orDash(roleString(u.Groups)), u.CreatedAt.Format(time.RFC3339))
			}
			return t.flush()
		})
	grant := &cobra.Command{
		Use:   "grant USER GROUP ROLE",
		Short: "Set a user's role (Read, Write, Admin) in a group; ROLE \"\" removes it",
		Args:  cobra.ExactArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			u, err := clientFor(cmd, e).SetRole(cmd.Context(), args[0], args[1], args[2])
			if err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "%s groups: %s\n", u.Name, orDash(roleString(u.Groups)))
			return nil
		},
	}
	rm := &cobra.Command{
		Use: "rm NAME", Short: "Delete a user and their tokens", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := clientFor(cmd, e).DeleteUser(cmd.Context(), args[0]); err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "deleted user %s\n", args[0])
			return nil
		},
	}
	cmd.AddCommand(create, ls, grant, rm)
	return cmd
}
