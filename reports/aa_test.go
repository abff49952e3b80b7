package reports

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/mstar-dev/mstar/reports/results"
)

// The A/A pairs committed from this repository's 2-core shared machine
// (two runs of the same code, back to back, under other agents' load) pass
// the diff with its default options in at least 19 of 20, the bar a CI job
// can trust, noise rule and all (NoisyMargin: at 1× the noise 3 and 5 of 20
// failed).
func TestCommittedAAPairsPass(t *testing.T) {
	for _, dir := range []string{"moe", "arena"} {
		t.Run(dir, func(t *testing.T) {
			passed, pairs := 0, 0
			for i := 1; i <= 20; i++ {
				read := func(side string) *Document {
					p := filepath.Join("..", "reports", "measured", "aa-cpu", dir, fmt.Sprintf("pair-%02d-%s.json.gz", i, side))
					d, err := results.ReadFile(p)
					if err != nil {
						t.Fatal(err)
					}
					return d
				}
				c := Diff([]*Document{read("a")}, []*Document{read("b")}, DiffOptions{Threshold: 5}) // report diff's defaults
				pairs++
				if f := c.Failures(); len(f) == 0 {
					passed++
				} else {
					t.Logf("pair %02d fails: %q", i, f)
				}
			}
			if passed < 19 {
				t.Errorf("%d of %d A/A pairs pass, want at least 19", passed, pairs)
			}
		})
	}
}
