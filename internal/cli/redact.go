package cli

import (
	"net/url"
	"regexp"
	"strings"
)

// redacted stands for a password in what the CLI prints, as url.URL's
// Redacted writes it.
const redacted = "xxxxx"

// redactURL is a database URL or connection string with every password in
// it masked: the URL's user password (postgres://u:PASSWORD@h/db), its
// query's password parameters (?password=, &sslpassword=), and libpq's
// key=value form (host=h password=PASSWORD, quoted or not). --print-config,
// logs and errors show it; the process list is another matter (PGPASSWORD
// or ~/.pgpass keep it out of there).
func redactURL(raw string) string {
	if !strings.Contains(raw, "://") {
		return redactKeyValues(raw)
	}
	u, err := url.Parse(raw)
	if err != nil {
		// Cannot be taken apart: show none of it but its scheme.
		scheme, _, _ := strings.Cut(raw, "://")
		return scheme + "://" + redacted
	}
	if u.RawQuery != "" {
		u.RawQuery = redactQuery(u.RawQuery)
	}
	return u.Redacted()
}

// secretParam reports whether a connection parameter holds a secret:
// libpq's password and sslpassword, and anything else named like one.
func secretParam(key string) bool {
	k := strings.ToLower(key)
	return strings.Contains(k, "password") || strings.Contains(k, "secret")
}

// redactQuery masks the secret parameters of a raw query, keeping the
// others as written and in their order.
func redactQuery(raw string) string {
	parts := strings.Split(raw, "&")
	for i, p := range parts {
		k, _, ok := strings.Cut(p, "=")
		if key, err := url.QueryUnescape(k); ok && (err != nil || secretParam(key)) {
			parts[i] = k + "=" + redacted
		}
	}
	return strings.Join(parts, "&")
}

// keyValue is one key=value pair of a libpq connection string: the value
// quoted, with \' and \\ escaped ('it\'s'), or a run of non-spaces.
var keyValue = regexp.MustCompile(`([A-Za-z_][A-Za-z0-9_]*)(\s*=\s*)('(?:[^'\\]|\\.)*'|\S*)`)

// redactKeyValues masks the secret values of a key=value connection
// string; a plain file path (a SQLite --db) comes back as it is.
func redactKeyValues(s string) string {
	return keyValue.ReplaceAllStringFunc(s, func(m string) string {
		sub := keyValue.FindStringSubmatch(m)
		if !secretParam(sub[1]) {
			return m
		}
		return sub[1] + sub[2] + redacted
	})
}

// holdsPassword reports whether a database URL or connection string
// carries a password that redactURL would mask.
func holdsPassword(raw string) bool {
	if !strings.Contains(raw, "://") {
		for _, m := range keyValue.FindAllStringSubmatch(raw, -1) {
			if secretParam(m[1]) {
				return true
			}
		}
		return false
	}
	u, err := url.Parse(raw)
	if err != nil {
		return true // redactURL shows none of it
	}
	if _, ok := u.User.Password(); ok {
		return true
	}
	for key := range u.Query() {
		if secretParam(key) {
			return true
		}
	}
	return false
}
