package bench

import (
	"os"
	"testing"
)

// TestAgentRSSOfSelf reads this test process as it would an agent: the
// sections account for its resident file pages, which include code.
func TestAgentRSSOfSelf(t *testing.T) {
	r, err := agentRSS(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if r.VmRSS == 0 || r.RssAnon+r.RssFile != r.VmRSS {
		t.Errorf("VmRSS %d, RssAnon %d, RssFile %d; want VmRSS = RssAnon + RssFile > 0", r.VmRSS, r.RssAnon, r.RssFile)
	}
	sections := r.Text + r.Rodata + r.Pclntab + r.Data
	if r.Text == 0 || sections > r.RssFile {
		t.Errorf("sections %+v sum to %d of RssFile %d; want code resident, and no more than RssFile", r, sections, r.RssFile)
	}
}
