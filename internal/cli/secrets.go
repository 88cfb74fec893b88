package cli

import (
	"crypto/x509"
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/nodemgr/nodemgr/internal/base/auth"
	"github.com/nodemgr/nodemgr/internal/base/cleartext"
	"github.com/nodemgr/nodemgr/internal/base/tlsca"
)

// secretFlags are the flags that take a secret, and what to use instead:
// a flag's value is on the command line, which every user of the machine
// can read in /proc/PID/cmdline (and ps shows).
var secretFlags = []struct{ flag, instead string }{
	{"token", "--token-file FILE or NODEMGR_TOKEN"},
	{"join-token", "--join-token-file FILE or NODEMGR_JOIN_TOKEN"},
	{"local-api-token", "--local-api-token-file FILE or NODEMGR_LOCAL_API_TOKEN"},
}

// warnSecretFlags warns, once per flag, about secrets given as flag values.
func warnSecretFlags(cmd *cobra.Command, e *env) {
	fl := cmd.Flags()
	for _, s := range secretFlags {
		if fl.Lookup(s.flag) != nil && fl.Changed(s.flag) {
			fmt.Fprintf(e.stderr, "warning: --%s is readable by every user of this machine (ps, /proc/PID/cmdline); use %s instead\n", s.flag, s.instead)
		}
	}
}

// warnOpenSecretFile warns that a file holding a secret is readable by others.
func warnOpenSecretFile(e *env, what, path string) {
	fmt.Fprintf(e.stderr, "warning: %s %s is readable by other users; chmod 600 it\n", what, path)
}

// clientConn is where and how client commands reach the server.
type clientConn struct {
	addr, token string
	roots       *x509.CertPool // CAs to verify the server by; nil: the system's
	// insecureHTTP lets the token go over plain HTTP beyond loopback
	// (--insecure-http, NODEMGR_INSECURE_HTTP).
	insecureHTTP bool
}

// resolveConn reads the client settings from flags, then the environment:
// address, token (--token, --token-file, NODEMGR_TOKEN, NODEMGR_TOKEN_FILE)
// and the CA to verify the server by (--ca-cert, NODEMGR_CA_CERT).
func resolveConn(cmd *cobra.Command, e *env) (*clientConn, error) {
	fl := cmd.Flags()
	c := &clientConn{addr: flagOrEnv(fl, e, "addr", "NODEMGR_ADDR")}
	token, err := secretValue(fl, e, "token", "NODEMGR_TOKEN")
	if err != nil {
		return c, err
	}
	c.token = token
	if path := flagOrEnv(fl, e, "ca-cert", "NODEMGR_CA_CERT"); path != "" {
		certs, err := tlsca.LoadCerts(path)
		if err != nil {
			return c, fmt.Errorf("--ca-cert (or NODEMGR_CA_CERT): %w; pass the PEM certificate of the server's CA, e.g. DATA_DIR/ca.crt of a server that made its own", err)
		}
		c.roots = tlsca.Pool(certs...)
		if c.addr != "" && !strings.Contains(c.addr, "://") {
			c.addr = "https://" + c.addr // a CA is only for HTTPS
		}
	}
	if c.addr == "" {
		c.addr = "http://127.0.0.1:7070"
	}
	insecure, err := insecureHTTP(fl, e)
	if err != nil {
		return c, err
	}
	c.insecureHTTP = insecure
	return c, nil
}

// insecureSetting is how the CLI's users accept a token in clear text.
const insecureSetting = "--insecure-http (or NODEMGR_INSECURE_HTTP=true)"

// insecureHTTP is --insecure-http, else $NODEMGR_INSECURE_HTTP.
func insecureHTTP(fl *pflag.FlagSet, e *env) (bool, error) {
	if f := fl.Lookup("insecure-http"); f != nil && f.Changed {
		return fl.GetBool("insecure-http")
	}
	v := e.getenv("NODEMGR_INSECURE_HTTP")
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("NODEMGR_INSECURE_HTTP: %q is not true or false", v)
	}
	return b, nil
}

// warnInsecureHTTP says, once, that the token is about to travel in clear
// text because the user allowed it.
func warnInsecureHTTP(e *env, c *clientConn) {
	if !c.insecureHTTP || c.token == "" || !cleartext.InClear(withScheme(c.addr)) {
		return
	}
	fmt.Fprintf(e.stderr, "warning: --insecure-http: the API token goes to %s in clear text; anyone on the network path can read it and act as you. Use https:// where you can\n", c.addr)
}

// withScheme is addr as the client reads it: host:port means http://.
func withScheme(addr string) string {
	if !strings.Contains(addr, "://") {
		return "http://" + addr
	}
	return addr
}

// flagOrEnv is the flag's value when it is set, else the variable's.
func flagOrEnv(fl *pflag.FlagSet, e *env, flag, variable string) string {
	if v, _ := fl.GetString(flag); v != "" {
		return v
	}
	return e.getenv(variable)
}

// secretValue reads a secret from --NAME, --NAME-file, $VAR or $VAR_FILE,
// the first that is set.
func secretValue(fl *pflag.FlagSet, e *env, flag, variable string) (string, error) {
	if v, _ := fl.GetString(flag); v != "" {
		return v, nil
	}
	path, _ := fl.GetString(flag + "-file")
	source := "--" + flag + "-file"
	if path == "" {
		if v := e.getenv(variable); v != "" {
			return v, nil
		}
		path, source = e.getenv(variable+"_FILE"), variable+"_FILE"
	}
	if path == "" {
		return "", nil
	}
	secret, open, err := auth.ReadSecretFile(path)
	if err != nil {
		return "", fmt.Errorf("%s: %w", source, err)
	}
	if open {
		warnOpenSecretFile(e, source, path)
	}
	return secret, nil
}
