package moe

import (
	"strings"
	"testing"
)

func TestTCConfigsValidAndEmulated(t *testing.T) {
	for _, c := range TCConfigs() {
		if err := c.Validate(); err != nil {
			t.Errorf("%v: %v", c, err)
		}
		d := c.Defines()
		if len(d) != 2 || d[0] != "-DMOE_TC_ONLY" || !strings.HasPrefix(d[1], "-DMOE_TC_LIST=TC("+c.tcID()+",") {
			t.Errorf("%v: defines %q", c, d)
		}
		g1, g2 := c.kernelNames()
		if g1 != "moe_gemm1_tc_"+c.tcID() || g2 != "moe_gemm2_tc_"+c.tcID() {
			t.Errorf("%v: kernels %s, %s", c, g1, g2)
		}
	}
}

func TestCandidates(t *testing.T) {
	shapes := map[string]Shape{
		"qwen3-30b-a3b":   {E: 128, K: 8, H: 2048, I: 768},
		"qwen3-235b-a22b": {E: 128, K: 8, H: 4096, I: 1536},
		"deepseek-v3-tp8": {E: 256, K: 8, H: 7168, I: 256},
		"mixtral-8x7b":    {E: 8, K: 2, H: 4096, I: 14336},
	}
	named := map[string]bool{}
	for _, c := range TCConfigs() {
		named[c.String()] = true
	}
	for name, s := range shapes {
		for _, m := range []int{1, 16, 64, 256, 1024, 4096} {
			cs := Candidates(s, m)
			if cs[0] != ChooseConfig(s, m) {
				t.Errorf("%s M=%d: first candidate %v, want the static table's %v", name, m, cs[0], ChooseConfig(s, m))
			}
			seen := map[string]bool{}
			kinds := map[string]int{}
			for _, c := range cs {
				if seen[c.String()] {
					t.Errorf("%s M=%d: %v twice", name, m, c)
				}
				seen[c.String()] = true
				kinds[c.Kernel]++
				if err := c.Validate(); err != nil {
					t.Errorf("%s M=%d: %v", name, m, err)
				}
				// Only the named tc configurations: the ones the emulator
				// and the NVRTC test check.
				if c.Kernel == "tc" && !named[c.String()] {
					t.Errorf("%s M=%d: %v is not a named tc configuration", name, m, c)
				}
			}
			per := perExpert(s, m)
			if per <= 6 && kinds["skinny"] < 2 {
				t.Errorf("%s M=%d (%.1f per expert): %d decode candidates, want several", name, m, per, kinds["skinny"])
			}
			if per >= 48 && kinds["tc"] < 4 {
				t.Errorf("%s M=%d (%.1f per expert): %d tc candidates, want the prefill set", name, m, per, kinds["tc"])
			}
			if per < 3 && kinds["tc"] > 0 {
				t.Errorf("%s M=%d (%.1f per expert): tc candidates %v for decode", name, m, per, cs)
			}
		}
	}
}
