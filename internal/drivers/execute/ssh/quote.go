package ssh

import "strings"

// Quote quotes s as one word for a POSIX shell: unchanged when it is made
// only of characters no shell treats specially, otherwise in single
// quotes, where nothing is special ($, `, \, newlines, globs), so the word
// reaches the command as it is; a single quote in s ends the quoting, is
// escaped with a backslash, and the quoting starts again. The empty string
// becomes a pair of single quotes.
func Quote(s string) string {
	if s == "" {
		return "''"
	}
	if strings.IndexFunc(s, needsQuote) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// needsQuote reports whether r is special to some POSIX shell in some
// position (=, for one, starts an assignment in the first word; ~ and #
// matter at the start of a word).
func needsQuote(r rune) bool {
	switch {
	case 'a' <= r && r <= 'z', 'A' <= r && r <= 'Z', '0' <= r && r <= '9':
		return false
	}
	return !strings.ContainsRune("-_./,:@+%", r)
}

// Join quotes each of argv with Quote and joins them with spaces: a
// command line that a POSIX shell splits back into argv exactly.
func Join(argv []string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		q[i] = Quote(a)
	}
	return strings.Join(q, " ")
}
