package executetest

import (
	"errors"
	"testing"
)

// Failing is a call that must fail with an error of Class (an errdefs
// class such as errdefs.ErrNotFound).
type Failing struct {
	Name  string
	Do    func() error
	Class error
}

// CheckFailing runs each call as a subtest and checks the class of its
// error. It logs the error too, so that a reader of -v output can judge
// whether the message says what went wrong.
func CheckFailing(t *testing.T, calls []Failing) {
	t.Helper()
	for _, c := range calls {
		t.Run(c.Name, func(t *testing.T) {
			err := c.Do()
			if !errors.Is(err, c.Class) {
				t.Errorf("%s = %v, want class %v", c.Name, err, c.Class)
			}
			t.Logf("%s: %v", c.Name, err)
		})
	}
}
