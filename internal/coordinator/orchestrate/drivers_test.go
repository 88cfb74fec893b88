package orchestrate

// Candidates are ranked by what their providers' records say (on the
// server's host or not), as in the program that links every driver.
import _ "github.com/nodemgr/nodemgr/internal/drivers/all"
