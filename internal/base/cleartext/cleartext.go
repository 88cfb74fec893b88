// Package cleartext decides whether a credential may travel over plain
// HTTP. Tokens must not cross a network in clear text, so plain http:// (and
// ws://) is for this machine only: a loopback address or "localhost".
// Anywhere else a token goes over HTTPS, unless the user said that they
// accept the risk (--insecure-http). The Go client, the CLI and the agent
// share this one rule, and check it before they dial anything.
package cleartext

import (
	"fmt"
	"net"
	"net/url"
	"strings"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
)

// Error refuses to send a credential to URL in clear text.
type Error struct {
	URL string
	// Setting is what accepts the risk, in the words of whoever reads
	// the error: "--insecure-http", "insecure_http" ...
	Setting string
}

func (e *Error) Error() string {
	host := e.URL
	if u, err := url.Parse(e.URL); err == nil && u.Host != "" {
		host = u.Host
	}
	return fmt.Sprintf("refusing to send a token in clear text to %s: plain http:// is for loopback addresses only; "+
		"use https://%s, or pass %s if you accept that the token travels unencrypted", e.URL, host, e.Setting)
}

// Is makes the refusal an invalid setting (errors.Is(err, errdefs.ErrInvalid)).
func (e *Error) Is(target error) bool { return target == errdefs.ErrInvalid }

// Check refuses rawURL for a credential when it is plain http:// or ws://
// to an address other than loopback and allowInsecure is false. setting
// names what allows it, for the error. A URL that does not parse is left
// to its user to report.
func Check(rawURL string, allowInsecure bool, setting string) error {
	if allowInsecure || !InClear(rawURL) {
		return nil
	}
	return &Error{URL: rawURL, Setting: setting}
}

// InClear reports whether a credential sent to rawURL would cross a network
// unencrypted: the scheme is http or ws and the host is not loopback.
func InClear(rawURL string) bool {
	u, err := url.Parse(rawURL)
	if err != nil {
		return false
	}
	switch strings.ToLower(u.Scheme) {
	case "http", "ws":
		return !IsLoopback(u.Hostname())
	}
	return false
}

// IsLoopback reports whether host (a name or an address, without a port)
// is this machine's loopback: "localhost" or an address in 127.0.0.0/8 or
// ::1. Other names are not resolved: what a name resolves to can change
// between this check and the dial.
func IsLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
