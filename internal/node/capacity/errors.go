package capacity

import (
	"fmt"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
)

// errNotOnboarded refuses work on a node that offers nothing. It is
// unavailable rather than a conflict: the node is fine, it just has not
// been offered to workloads yet.
var errNotOnboarded = fmt.Errorf("node is not onboarded; run `nodemgr node onboard NODE --share 50`: %w", errdefs.ErrUnavailable)

// ShortError says that a workload or commitment does not fit, and by how
// much. It is a conflict (HTTP 409): the request is valid and the node is
// up, but the books (or the machine) refuse it in their current state, and
// it may fit once something is freed.
type ShortError struct {
	Wanted api.Resources // what was asked for
	Free   api.Resources // what was free to give it
	Short  api.Resources // Wanted − Free where Wanted is larger, else 0
	// Machine is true when Free is what the machine really has free
	// (memory and disk only), rather than the books' share.
	Machine bool
}

// newShortError returns a *ShortError if want does not fit in free, else nil.
// Only the dimensions in d are compared.
func newShortError(want, free amount, d dims, machine bool) *ShortError {
	short := free.shortBy(want)
	if short.nonZero()&d == 0 {
		return nil
	}
	mask := func(a amount) amount {
		if d&dimCPU == 0 {
			a.milliCPU = 0
		}
		if d&dimMem == 0 {
			a.memMB = 0
		}
		if d&dimDisk == 0 {
			a.diskMB = 0
		}
		if d&dimGPU == 0 {
			a.gpus = 0
		}
		return a
	}
	return &ShortError{
		Wanted:  mask(want).resources(),
		Free:    mask(free).resources(),
		Short:   mask(short).resources(),
		Machine: machine,
	}
}

func (e *ShortError) Error() string {
	want, free, short := toAmount(e.Wanted), toAmount(e.Free), toAmount(e.Short)
	d := want.nonZero()
	if e.Machine {
		return fmt.Sprintf("does not fit on this machine now: needs %s; the machine has %s available (short: %s); "+
			"other programs use the rest: free memory or disk on the machine, or ask for less",
			want.format(d), free.format(d), short.format(short.nonZero()))
	}
	return fmt.Sprintf("does not fit on this node: needs %s; free %s (short: %s); "+
		"free allocations or commitments (`nodemgr node resources` lists them), or onboard a larger share",
		want.format(d), free.format(d), short.format(short.nonZero()))
}

// Is makes errors.Is(err, errdefs.ErrConflict) true.
func (e *ShortError) Is(target error) bool { return target == errdefs.ErrConflict }
