// Package humantime renders times for people reading a table or a page:
// "3m ago". The CLI and the dashboard both use it, so a node's last
// heartbeat reads the same in both.
package humantime

import (
	"fmt"
	"time"
)

// Ago renders at relative to now: "just now" for a time ahead of now (a
// clock a little off), then "4s ago", "3m ago", "5h ago" up to two days,
// and "3d ago" beyond.
func Ago(at, now time.Time) string {
	d := now.Sub(at)
	switch {
	case d < 0:
		return "just now"
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d.Minutes()))
	case d < Days:
		return fmt.Sprintf("%dh ago", int(d.Hours()))
	}
	return fmt.Sprintf("%dd ago", int(d.Hours()/24))
}

// Days is the age from which Ago counts days rather than hours; a caller
// that shows older times another way (a date) compares against it.
const Days = 48 * time.Hour
