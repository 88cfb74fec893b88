package aws

import (
	"cmp"
	"fmt"
	"math"
	"slices"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
)

// instanceSize is one entry of the built-in instance type table.
type instanceSize struct {
	name     string
	arch     string
	vcpus    int
	memoryMB int
	// price is the approximate Linux on-demand USD per hour in us-east-1,
	// used only to order the table: "the cheapest that fits" holds in
	// other regions too, whose prices differ by about the same factor.
	price float64
}

// instanceSizes are common current-generation types: burstable (t3, t4g),
// compute (c6i, c7g), general purpose (m6i, m7g) and memory (r6i, r7g).
// Anything else can be named with extra.instance_type.
var instanceSizes = func() []instanceSize {
	type family struct {
		prefix, arch string
		sizes        []string
		vcpus        []int
		gibPerVCPU   float64
		pricePerVCPU float64
	}
	families := []family{
		{"t3", archX86, []string{"nano", "micro", "small", "medium", "large", "xlarge", "2xlarge"}, []int{2, 2, 2, 2, 2, 4, 8}, 0, 0},
		{"t4g", archARM, []string{"nano", "micro", "small", "medium", "large", "xlarge", "2xlarge"}, []int{2, 2, 2, 2, 2, 4, 8}, 0, 0},
		{"c6i", archX86, nil, nil, 2, 0.0425},
		{"m6i", archX86, nil, nil, 4, 0.048},
		{"r6i", archX86, nil, nil, 8, 0.063},
		{"c7g", archARM, nil, nil, 2, 0.03625},
		{"m7g", archARM, nil, nil, 4, 0.0408},
		{"r7g", archARM, nil, nil, 8, 0.05355},
	}
	// Burstable: memory doubles from 0.5 GiB, two vCPUs up to large;
	// prices per the AWS price list.
	burstMB := []int{512, 1024, 2048, 4096, 8192, 16384, 32768}
	burstPrice := map[string][]float64{
		"t3":  {0.0052, 0.0104, 0.0208, 0.0416, 0.0832, 0.1664, 0.3328},
		"t4g": {0.0042, 0.0084, 0.0168, 0.0336, 0.0672, 0.1344, 0.2688},
	}
	var out []instanceSize
	for _, f := range families {
		if f.sizes != nil {
			for i, s := range f.sizes {
				out = append(out, instanceSize{f.prefix + "." + s, f.arch, f.vcpus[i], burstMB[i], burstPrice[f.prefix][i]})
			}
			continue
		}
		// Fixed performance: memory and price in proportion to vCPUs.
		for _, s := range []struct {
			size  string
			vcpus int
		}{{"large", 2}, {"xlarge", 4}, {"2xlarge", 8}, {"4xlarge", 16}, {"8xlarge", 32}, {"16xlarge", 64}} {
			out = append(out, instanceSize{f.prefix + "." + s.size, f.arch, s.vcpus, int(f.gibPerVCPU * 1024 * float64(s.vcpus)), f.pricePerVCPU * float64(s.vcpus)})
		}
	}
	slices.SortStableFunc(out, func(a, b instanceSize) int {
		return cmp.Or(cmp.Compare(a.price, b.price), cmp.Compare(a.memoryMB, b.memoryMB), cmp.Compare(a.name, b.name))
	})
	return out
}()

// chooseType returns the cheapest type in the table for arch with at
// least cpu vCPUs and memoryMB MiB.
func chooseType(arch string, cpu, memoryMB float64) (instanceSize, error) {
	for _, s := range instanceSizes {
		if s.arch == arch && float64(s.vcpus) >= cpu && float64(s.memoryMB) >= memoryMB {
			return s, nil
		}
	}
	largest := 0
	for _, s := range instanceSizes {
		if s.arch == arch {
			largest = max(largest, s.vcpus)
		}
	}
	if largest == 0 {
		return instanceSize{}, errdefs.Field("extra.instance_type", "the built-in table has no %s types; name one with extra.instance_type", arch)
	}
	return instanceSize{}, errdefs.Field("extra.instance_type", "no %s type in the built-in table has %v vCPUs and %v MiB (the largest have %d vCPUs); name one with extra.instance_type",
		arch, math.Ceil(cpu), math.Ceil(memoryMB), largest)
}

func (s instanceSize) String() string {
	return fmt.Sprintf("%s (%d vCPUs, %d MiB)", s.name, s.vcpus, s.memoryMB)
}
