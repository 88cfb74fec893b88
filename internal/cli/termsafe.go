package cli

import (
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// Everything the CLI prints for people goes through safeWriter: names,
// labels, reasons and error messages come from other users and agents, and
// a control sequence in them (ESC [2J clears the screen, a carriage return
// overwrites the line) must show as text, never act on the terminal. Byte
// streams the user asked for (a command's output, logs, files) go to the
// raw writers untouched, and --json is escaped by the JSON encoder.

// safeWriter writes through to w with control characters escaped.
type safeWriter struct {
	w       io.Writer
	pending []byte // the start of a UTF-8 sequence cut by the end of a write
}

func (s *safeWriter) Write(p []byte) (int, error) {
	buf := append(s.pending, p...)
	s.pending = nil
	// Keep an incomplete rune at the end for the next write.
	if cut := incompleteTail(buf); cut > 0 {
		s.pending = append([]byte(nil), buf[len(buf)-cut:]...)
		buf = buf[:len(buf)-cut]
	}
	if _, err := io.WriteString(s.w, termSafe(string(buf))); err != nil {
		return 0, err
	}
	return len(p), nil
}

// incompleteTail is how many bytes at the end of b start a UTF-8 sequence
// that b does not finish.
func incompleteTail(b []byte) int {
	for i := 1; i <= 3 && i <= len(b); i++ {
		c := b[len(b)-i]
		if c < 0x80 {
			return 0
		}
		if utf8.RuneStart(c) {
			if !utf8.FullRune(b[len(b)-i:]) {
				return i
			}
			return 0
		}
	}
	return 0
}

// termSafe returns s with every control character but newline and tab
// written as a visible escape (\x1b, \r, \u009b), and invalid UTF-8 as \xNN.
func termSafe(s string) string {
	if !needsEscape(s) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\n' || r == '\t':
			b.WriteRune(r)
		case r == '\r':
			b.WriteString(`\r`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		case r >= 0x80 && r <= 0x9f:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

func needsEscape(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < 0x20 && c != '\n' && c != '\t') || c == 0x7f || c >= 0x80 {
			if c >= 0x80 {
				return !utf8.ValidString(s[i:]) || hasC1(s[i:])
			}
			return true
		}
	}
	return false
}

func hasC1(s string) bool {
	for _, r := range s {
		if r < 0x20 && r != '\n' && r != '\t' || r == 0x7f || r >= 0x80 && r <= 0x9f {
			return true
		}
	}
	return false
}

// redraw rewrites the current terminal line with a progress line.
func redraw(w io.Writer, line string) {
	fmt.Fprint(w, "\r"+termSafe(line))
}

// rawOut and rawErr are the byte-stream writers (the people's writers in
// tests that set no raw ones).
func (e *env) rawOut() io.Writer {
	if e.rawStdout != nil {
		return e.rawStdout
	}
	return e.stdout
}

func (e *env) rawErr() io.Writer {
	if e.rawStderr != nil {
		return e.rawStderr
	}
	return e.stderr
}
