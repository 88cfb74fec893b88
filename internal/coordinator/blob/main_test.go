package blob_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/internal/coordinator/blob/blobtest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	blobtest.StopMoto()
	os.Exit(code)
}

func ctxFor(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}
