package postgres

import (
	"testing"

	"github.com/nodemgr/nodemgr/internal/store/storetest"
)

// BenchmarkNodeReadsBlob: see storetest.BenchNodeReadsBlob.
func BenchmarkNodeReadsBlob(b *testing.B) {
	storetest.BenchNodeReadsBlob(b, open(b, newDatabase(b)))
}
