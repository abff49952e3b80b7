package moe

import (
	"io/fs"
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

// On Hopper the static table picks by slots per touched expert: 16-row tc
// tiles up to 8 (from 32 slots in all), 32-row ones up to 32, the wg
// kernel's ping-pong tiles from 32 and its cooperative 128-row tiles from
// 256 (where the H200 tunings put them); on every other GPU the portable
// table.
func TestChooseConfigOnHopper(t *testing.T) {
	shapes := map[string]Shape{
		"qwen3-30b-a3b":   {E: 128, K: 8, H: 2048, I: 768},
		"qwen3-235b-a22b": {E: 128, K: 8, H: 4096, I: 1536},
		"deepseek-v3-tp8": {E: 256, K: 8, H: 7168, I: 256},
		"mixtral-8x7b":    {E: 8, K: 2, H: 4096, I: 14336},
	}
	for name, s := range shapes {
		for _, m := range []int{1, 2, 4, 16, 64, 128, 256, 512, 1024, 2048, 4096} {
			hopper, other := ChooseConfigOn(Hopper, s, m), ChooseConfigOn(80, s, m)
			if other != ChooseConfig(s, m) {
				t.Errorf("%s M=%d: sm_80 picks %v, not the portable %v", name, m, other, ChooseConfig(s, m))
			}
			per := perExpert(s, m)
			var want string
			switch {
			case per >= 256:
				want = "wg:nc=2,bn=256,stages=4,gm=8,tma=1"
			case per >= 128:
				want = "wg:nc=2,bn=256,stages=4,gm=8,pp=1,tma=1"
			case per >= 64:
				want = "wg:nc=2,bn=256,stages=3,gm=8,tma=1"
			case per >= 32:
				want = "wg:nc=2,bn=256,stages=4,gm=8,pp=1,tma=1"
			case per > 8:
				want = "tc:bm=32,bn=256,bk=128,wm=1,wn=8,stages=3,gm=8,minb=1"
			case m*s.K >= 32:
				want = "tc:bm=16,bn=256,bk=128,wm=1,wn=8,stages=3,gm=8,minb=1,ov=1"
			default:
				want = ChooseConfig(s, m).String()
			}
			if hopper.String() != want {
				t.Errorf("%s M=%d (%.1f slots per expert, %d in all): Hopper picks %v, want %s", name, m, per, m*s.K, hopper, want)
			}
		}
	}
	// A shape no tensor map can load (H not a multiple of 8) gets the
	// cp.async twins, and every pick fits its shape.
	odd := Shape{E: 64, K: 4, H: 2052, I: 512}
	for _, tt := range []struct {
		m    int
		want string
	}{{512, "wg:nc=2,bn=256,stages=4,gm=8,pp=1"}, {1024, "wg:nc=2,bn=256,stages=4,gm=8,pp=1"}, {4096, "wg:nc=2,bn=256,stages=4,gm=8"}} {
		c := ChooseConfigOn(Hopper, odd, tt.m)
		if c.String() != tt.want || CheckConfigShape(c, odd, tt.m) != nil {
			t.Errorf("H=2052 M=%d (%.0f slots per expert): %v (%v), want %s", tt.m, perExpert(odd, tt.m), c, CheckConfigShape(c, odd, tt.m), tt.want)
		}
	}
}

// On Hopper the tuner leaves out the configurations the H200 tunings found
// dominated, keeps the static pick first and every configuration a shipped
// tuned file chose; MSTAR_MOE_TUNE_ALL brings the rest back.
func TestCandidatesOnHopperPrunes(t *testing.T) {
	tables := map[string]map[string]Config{"tiled": tiledTable, "tc": tcTable, "wg": wgTable}
	dominated := map[string]bool{}
	for kernel, names := range hopperDominated {
		for _, n := range names {
			c, ok := tables[kernel][n]
			if !ok {
				t.Fatalf("hopperDominated names %s %q, which is not in its table", kernel, n)
			}
			dominated[c.String()] = true
			if kernel == "tc" {
				dominated[ov(c).String()] = true
				dominated[ov2(c).String()] = true
			}
		}
	}
	s := Shape{E: 128, K: 8, H: 2048, I: 768}
	left := 0
	for _, m := range []int{1, 16, 64, 256, 1024, 4096} {
		all, pruned := CandidatesOn(0, s, m), CandidatesOn(Hopper, s, m)
		if pruned[0].String() != ChooseConfigOn(Hopper, s, m).String() {
			t.Errorf("M=%d: Hopper's first candidate %v is not its static pick", m, pruned[0])
		}
		in := map[string]bool{}
		for _, c := range pruned {
			if dominated[c.String()] && c.String() != pruned[0].String() {
				t.Errorf("M=%d: dominated %v still a Hopper candidate", m, c)
			}
			in[c.String()] = true
		}
		for _, c := range all[1:] {
			if !dominated[c.String()] && !in[c.String()] {
				t.Errorf("M=%d: %v, not dominated, left out on Hopper", m, c)
			}
			if dominated[c.String()] {
				left++
			}
		}
		t.Setenv(EnvTuneAll, "1")
		every := CandidatesOn(Hopper, s, m)
		t.Setenv(EnvTuneAll, "")
		if len(every) < len(all)-1 {
			t.Errorf("M=%d: with %s, %d candidates on Hopper, want the %d of the full set", m, EnvTuneAll, len(every), len(all))
		}
	}
	if left == 0 {
		t.Error("no dominated configuration among the full candidates: the test checks nothing")
	}
	// No shipped pick is ever pruned away.
	entries, err := fs.ReadDir(ShippedConfigs(), "configs")
	if err != nil || len(entries) == 0 {
		t.Fatalf("shipped configs: %v (%d files)", err, len(entries))
	}
	for _, e := range entries {
		b, err := fs.ReadFile(ShippedConfigs(), "configs/"+e.Name())
		if err != nil {
			t.Fatal(err)
		}
		f, err := ParseTunedFile(b, e.Name())
		if err != nil {
			t.Fatal(err)
		}
		sh := Shape{E: f.E, K: f.TopK, H: f.K, I: f.N}
		for _, m := range f.TunedBatchSizes() {
			c, _ := f.Pick(sh, m)
			for _, g := range []Config{c.Gemm(1), c.Gemm(2)} {
				if dominatedOnHopper(g) {
					t.Errorf("%s M=%d: the shipped pick's %v is pruned on Hopper", e.Name(), m, g)
				}
			}
		}
	}
}

func TestSplitConfig(t *testing.T) {
	sk := Config{Kernel: "skinny", NT: 1, W1: 16, W2: 16}
	tc := tcTable["32x128k64s3b3"]
	c := Split(sk, tc)
	// gemm1 keeps what gemm1 reads: w2 is gemm2's.
	if want1 := (Config{Kernel: "skinny", NT: 1, W1: 16}); !c.IsSplit() || c.Gemm(1).String() != want1.String() || c.Gemm(2).String() != tc.String() {
		t.Fatalf("Split(%v, %v) = %v (gemm1 %v, gemm2 %v)", sk, tc, c, c.Gemm(1), c.Gemm(2))
	}
	back, err := ParseConfig(c.String())
	if err != nil || back.String() != c.String() {
		t.Fatalf("ParseConfig(%q) = %v, %v", c.String(), back, err)
	}
	if got := Split(tc, tc); got.IsSplit() {
		t.Errorf("Split of one configuration with itself is split: %v", got)
	}
	// A half's setting only the other GEMM reads is dropped: gemm1 of an fc
	// configuration is the unfused gemm1, gemm2 of an sa one the plain gemm2,
	// and skinny halves that differ only so are one configuration.
	fc := Config{Kernel: "skinny", NT: 1, W1: 16, W2: 4, FC: 1}
	sa := Config{Kernel: "skinny", NT: 1, W1: 16, W2: 16, SA: 1}
	if got := Split(fc, tc); got.Gemm(1).FC != 0 || got.Gemm(1).W2 != 0 || !got.IsSplit() {
		t.Errorf("Split(%v, %v) = %v: gemm1 keeps fc or w2", fc, tc, got)
	}
	if got := Split(tc, sa); got.Gemm(2).SA != 0 || got.Gemm(2).W1 != 0 {
		t.Errorf("Split(%v, %v) = %v: gemm2 keeps sa or w1", tc, sa, got)
	}
	both := Config{Kernel: "skinny", NT: 1, W1: 16, W2: 16, SA: 1, FC: 1}
	if got := Split(sa, fc); got.IsSplit() || got.String() != (Config{Kernel: "skinny", NT: 1, W1: 16, W2: 4, SA: 1, FC: 1}).String() {
		t.Errorf("Split(%v, %v) = %v, want the one configuration skinny w1=16,w2=4 with sa and fc", sa, fc, got)
	}
	if got := Split(both, both); got.String() != both.String() {
		t.Errorf("Split(%v, itself) = %v", both, got)
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

// pl=1 (programmatic launch) is a per-GEMM setting: it reads back from its
// name on every family that takes it, makes a split where only one GEMM has
// it, and marks exactly that GEMM's launch (and for gemm2 the combine's).
func TestProgrammaticConfig(t *testing.T) {
	tc := tcTable["16x256k128s3w8ov"]
	wg := wgTable["128x256s4"]
	sk := Config{Kernel: "skinny", NT: 1, W1: 16, W2: 4}
	for _, c := range []Config{tc, wg, sk, Split(sk, tc)} {
		both := c.WithProgrammatic(true, true)
		if !both.Programmatic() || both.Gemm(1).PL != 1 || both.Gemm(2).PL != 1 {
			t.Errorf("%v with both GEMMs programmatic: %v", c, both)
		}
		if !strings.Contains(both.String(), ",pl=1") {
			t.Errorf("%v: name %q does not say pl=1", c, both)
		}
		for _, v := range []Config{both, c.WithProgrammatic(true, false), c.WithProgrammatic(false, true)} {
			back, err := ParseConfig(v.String())
			if err != nil || back.String() != v.String() || back.Gemm(1).PL != v.Gemm(1).PL || back.Gemm(2).PL != v.Gemm(2).PL {
				t.Errorf("ParseConfig(%q) = %v, %v", v.String(), back, err)
			}
		}
		if plain := both.WithProgrammatic(false, false); plain.Programmatic() || plain.String() != c.String() {
			t.Errorf("%v without programmatic launches: %v", both, plain)
		}
	}
	if one := tc.WithProgrammatic(false, true); !one.IsSplit() || one.Gemm(1).PL != 0 || one.Gemm(2).PL != 1 {
		t.Errorf("pl on gemm2 alone: %v, want a split whose gemm2 has pl=1", one)
	}
	for _, bad := range []string{"skinny:nt=1,pl=2", "tc:bm=16,bn=256,bk=128,wm=1,wn=8,stages=3,gm=8,minb=1,pl=2", "tiled:bm=64,bn=128,bk=32,wm=2,wn=2,stages=4,pl=1"} {
		c, err := ParseConfig(bad)
		if err == nil {
			t.Errorf("ParseConfig(%q) = %v, want an error", bad, c)
		} else if strings.HasSuffix(bad, "pl=2") && !strings.Contains(err.Error(), "pl=2") {
			t.Errorf("ParseConfig(%q): %v does not show the bad value", bad, err)
		}
	}
	s := Shape{E: 8, K: 2, H: 256, I: 128}
	for _, tt := range []struct {
		c    Config
		want map[string]bool // kernel → launched programmatically
	}{
		{tc, map[string]bool{}},
		{tc.WithProgrammatic(true, false), map[string]bool{"moe_gemm1": true}},
		{tc.WithProgrammatic(false, true), map[string]bool{"moe_gemm2": true, "moe_combine": true}},
		{sk.WithProgrammatic(true, true), map[string]bool{"moe_gemm1": true, "moe_gemm2": true, "moe_combine": true}},
	} {
		l := newPlanLayout(s, 4, tt.c, [2]int{132, 132})
		for _, ls := range l.launches {
			want := false
			for prefix, v := range tt.want {
				if strings.HasPrefix(ls.kernel, prefix) {
					want = v
				}
			}
			if ls.programmatic != want {
				t.Errorf("%v: %s programmatic = %v, want %v", tt.c, ls.kernel, ls.programmatic, want)
			}
		}
	}
}
