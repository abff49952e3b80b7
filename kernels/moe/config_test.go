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
			// Below 3 slots per expert only 16-row tiles compete with
			// the decode kernels (more padding than that costs weight reads).
			for _, c := range cs {
				if per < 3 && c.Kernel == "tc" && c.BM != 16 {
					t.Errorf("%s M=%d (%.1f per expert): %v for decode", name, m, per, c)
				}
			}
		}
	}
}

func TestWGConfigs(t *testing.T) {
	for _, c := range WGConfigs() {
		if err := c.Validate(); err != nil {
			t.Errorf("%v: %v", c, err)
		}
		if rows := 64 * c.NC / (1 + c.PP); c.Block() != rows || c.Threads(1) != 128*(c.NC+1) {
			t.Errorf("%v: block %d rows, %d threads", c, c.Block(), c.Threads(1))
		}
		d := c.Defines()
		if len(d) != 2 || d[0] != "-DMOE_TC_ONLY" || !strings.HasPrefix(d[1], "-DMOE_WG_LIST=WG("+c.wgID()+",") {
			t.Errorf("%v: defines %q", c, d)
		}
		back, err := ParseConfig(c.String())
		if err != nil || back != c {
			t.Errorf("ParseConfig(%q) = %v, %v; want %v", c.String(), back, err, c)
		}
	}
	for _, bad := range []string{"wg:nc=3", "wg:bn=96", "wg:stages=2", "wg:nc=2,bn=256,stages=5"} {
		if _, err := ParseConfig(bad); err == nil {
			t.Errorf("ParseConfig(%q): no error", bad)
		}
	}
	if c, err := ParseConfig("wg:64x128s4"); err != nil || c != wgTable["64x128s4"] {
		t.Errorf("wg:64x128s4 = %v, %v", c, err)
	}
}

func TestTuneFilter(t *testing.T) {
	s := Shape{E: 128, K: 8, H: 2048, I: 768}
	all := Candidates(s, 4096)
	t.Setenv(EnvTuneFilter, "^wg:")
	got := Candidates(s, 4096)
	if got[0] != all[0] {
		t.Errorf("first candidate %v, want the static pick %v kept", got[0], all[0])
	}
	if len(got) < 2 || len(got) >= len(all) {
		t.Fatalf("%d of %d candidates kept", len(got), len(all))
	}
	for _, c := range got[1:] {
		if c.Kernel != "wg" {
			t.Errorf("%v passed the filter ^wg:", c)
		}
	}
	t.Setenv(EnvTuneFilter, "([")
	if ValidateTuneFilter() == nil {
		t.Error("a filter that is not a regular expression was accepted")
	}
}

// On Hopper the static table picks the wg kernel from 128 slots per touched
// expert and 16-row tc tiles up to 8 from 32 slots (where the H200 tuning
// chose them in the reference shapes); elsewhere, and on every other GPU,
// the portable table.
func TestChooseConfigOnHopper(t *testing.T) {
	shapes := map[string]Shape{
		"qwen3-30b-a3b":   {E: 128, K: 8, H: 2048, I: 768},
		"qwen3-235b-a22b": {E: 128, K: 8, H: 4096, I: 1536},
		"deepseek-v3-tp8": {E: 256, K: 8, H: 7168, I: 256},
		"mixtral-8x7b":    {E: 8, K: 2, H: 4096, I: 14336},
	}
	for name, s := range shapes {
		for _, m := range []int{1, 2, 4, 16, 64, 256, 512, 1024, 2048, 4096} {
			hopper, other := ChooseConfigOn(Hopper, s, m), ChooseConfigOn(80, s, m)
			if other != ChooseConfig(s, m) {
				t.Errorf("%s M=%d: sm_80 picks %v, not the portable %v", name, m, other, ChooseConfig(s, m))
			}
			wantWG := perExpert(s, m) >= 128
			if (hopper.Kernel == "wg") != wantWG {
				t.Errorf("%s M=%d (%.0f slots per expert): Hopper picks %v", name, m, perExpert(s, m), hopper)
			}
			if wantWG && hopper.String() != "wg:nc=2,bn=256,stages=4,gm=8,pp=1" {
				t.Errorf("%s M=%d: Hopper picks %v", name, m, hopper)
			}
			want16 := perExpert(s, m) <= 8 && m*s.K >= 32
			if got := hopper.Kernel == "tc" && hopper.BM == 16; got != want16 {
				t.Errorf("%s M=%d (%.1f slots per expert, %d in all): Hopper picks %v", name, m, perExpert(s, m), m*s.K, hopper)
			}
		}
	}
}

func TestSplitConfig(t *testing.T) {
	sk := Config{Kernel: "skinny", NT: 1, W1: 16, W2: 16}
	tc := tcTable["32x128k64s3b3"]
	c := Split(sk, tc)
	if !c.IsSplit() || c.Gemm(1).String() != sk.String() || c.Gemm(2).String() != tc.String() {
		t.Fatalf("Split(%v, %v) = %v (gemm1 %v, gemm2 %v)", sk, tc, c, c.Gemm(1), c.Gemm(2))
	}
	back, err := ParseConfig(c.String())
	if err != nil || back.String() != c.String() {
		t.Fatalf("ParseConfig(%q) = %v, %v", c.String(), back, err)
	}
	if got := Split(tc, tc); got.IsSplit() {
		t.Errorf("Split of one configuration with itself is split: %v", got)
	}
	if got, err := ParseConfig("skinny:nt=1+tc:32x128k64s3b3"); err != nil || got.Gemm(2).String() != tc.String() || got.Gemm(1).Kernel != "skinny" {
		t.Errorf("ParseConfig by name: %v, %v", got, err)
	}
	for _, bad := range []string{"skinny:nt=1+auto", "skinny:nt=1+tc:32x128k64s3b3+skinny:nt=2", "tiled:bm=64,bn=128+skinny:nt=1", "skinny:nt=3+skinny:nt=1"} {
		if c, err := ParseConfig(bad); err == nil {
			t.Errorf("ParseConfig(%q) = %v, want an error", bad, c)
		}
	}
}
