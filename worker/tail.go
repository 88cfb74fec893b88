package worker

import "unicode/utf8"

// tailBuffer is an io.Writer that keeps the last maxTail bytes written.
type tailBuffer struct {
	b   []byte
	cut bool // bytes were dropped from the front
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	n := len(p)
	if len(p) >= maxTail {
		t.b = append(t.b[:0], p[len(p)-maxTail:]...)
		t.cut = true
		return n, nil
	}
	if over := len(t.b) + len(p) - maxTail; over > 0 {
		t.b = t.b[:copy(t.b, t.b[over:])]
		t.cut = true
	}
	t.b = append(t.b, p...)
	return n, nil
}

func (t *tailBuffer) String() string {
	b := t.b
	if t.cut {
		b = trimPartialRune(b)
	}
	return string(b)
}

// tailString keeps the last maxTail bytes of s.
func tailString(s string) string {
	if len(s) <= maxTail {
		return s
	}
	return string(trimPartialRune([]byte(s[len(s)-maxTail:])))
}

// trimPartialRune drops the continuation bytes of a character whose start
// was cut off.
func trimPartialRune(b []byte) []byte {
	for i := 0; i < utf8.UTFMax && i < len(b); i++ {
		if utf8.RuneStart(b[i]) {
			return b[i:]
		}
	}
	return b // not UTF-8 anyway
}
