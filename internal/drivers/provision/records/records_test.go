package records

import (
	"slices"
	"strings"
	"testing"

	"github.com/nodemgr/nodemgr/internal/drivers/provision"
)

// TestDescribedProvidersCheckButMakeNothing: a build with the records
// alone (the client build) knows every provider, in order, with the keys
// its blocks may set, and says why it cannot make one.
func TestDescribedProvidersCheckButMakeNothing(t *testing.T) {
	Describe()
	if got, want := provision.Names(), []string{"local", "docker", "libvirt", "aws"}; !slices.Equal(got, want) {
		t.Fatalf("described providers = %v, want %v", got, want)
	}
	d, err := provision.Lookup("provider", "aws")
	if err != nil || !slices.Contains(d.ExtraKeys, "instance_type") {
		t.Fatalf("Lookup(aws) = %+v, %v; want its record with instance_type among its keys", d, err)
	}
	_, err = provision.New("aws", nil)
	if err == nil || !strings.Contains(err.Error(), "client build") {
		t.Fatalf("New(aws) in a build of records alone = %v, want an error saying this build only describes it", err)
	}
}
