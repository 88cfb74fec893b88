package server

// The server makes providers and executors by name, and checks templates
// against their records, as the program that links them all does.
import _ "github.com/nodemgr/nodemgr/internal/drivers/all"
