package cli

// Every provider and executor registers itself here, once for the whole
// program: the server makes them by name, and the CLI checks templates and
// mappings against their records.
import _ "github.com/nodemgr/nodemgr/internal/drivers/all"
