// Package humansize renders byte counts for people reading a table or a
// page: "812 B", "64.0 KiB", "1.3 MiB". The CLI and the dashboard both use
// it, so a size reads the same in both.
package humansize

import "fmt"

// Bytes renders n bytes in the largest binary unit it reaches.
func Bytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
