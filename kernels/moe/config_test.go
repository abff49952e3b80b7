package moe

import (
	"io/fs"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/mstar-dev/mstar/kernels/routing"
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
	// mc=2: clusters over n-tile pairs name their own kernels, read back,
	// and take the gathered barriers' bytes; they need tma=1 and no pp.
	if c, err := ParseConfig("wg:nc=2,bn=256,stages=4,gm=8,tma=1,mc=2"); err != nil || c != mn(wgTable["128x256s4tma"]) || c.wgID() != "2_256_4_8_tma_mn" ||
		c.String() != "wg:nc=2,bn=256,stages=4,gm=8,tma=1,mc=2" || c.SharedBytes() != wgTable["128x256s4tma"].SharedBytes()+8*4 {
		t.Errorf("mc=2: %v (%s, %d bytes), %v", c, c.wgID(), c.SharedBytes(), err)
	}
	for _, bad := range []string{"wg:nc=2,bn=256,stages=4,gm=8,mc=2", "wg:nc=2,bn=256,stages=4,gm=8,pp=1,tma=1,mc=2", "wg:nc=2,bn=256,stages=4,gm=8,tma=1,mc=3"} {
		if _, err := ParseConfig(bad); err == nil {
			t.Errorf("ParseConfig(%q): no error", bad)
		}
	}
	// l2=4: a launch attribute, so the kernels (and the module) are l2=0's;
	// the string reads back.
	c, err := ParseConfig("wg:nc=2,bn=256,stages=4,gm=8,tma=1,mc=1,l2=4")
	if err != nil || c != withL2(wgTable["128x256s4mc"], 4) || c.wgID() != wgTable["128x256s4mc"].wgID() ||
		strings.Join(c.Defines(), " ") != strings.Join(wgTable["128x256s4mc"].Defines(), " ") || c.String() != "wg:nc=2,bn=256,stages=4,gm=8,tma=1,mc=1,l2=4" {
		t.Errorf("l2=4: %v (%s), %v", c, c.wgID(), err)
	}
	for _, bad := range []string{"wg:nc=2,bn=256,stages=4,gm=8,l2=16", "wg:nc=2,bn=256,stages=4,gm=8,l2=8", "wg:nc=2,bn=256,stages=4,gm=8,l2=12", "wg:nc=2,bn=256,stages=4,gm=8,l2=2", "wg:nc=2,bn=256,stages=4,gm=8,l2=1", "tc:bm=16,bn=256,bk=128,wm=1,wn=8,stages=3,gm=8,minb=1,l2=1"} {
		if _, err := ParseConfig(bad); err == nil {
			t.Errorf("ParseConfig(%q): no error", bad)
		}
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

// On Hopper the static table picks by slots per touched expert: 16×64 tc
// tiles up to 2 (self-aligning at 64 slots or fewer, launched
// programmatically), 16×256 ones up to 8,
// 32×256 ones up to 32, the wg kernel's ping-pong tiles from 32 and its
// cooperative 128-row tiles from 256 (where the tunings put them); on every
// other GPU the portable table.
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
			case per > 2:
				want = "tc:bm=16,bn=256,bk=128,wm=1,wn=8,stages=3,gm=8,minb=1,ov=1"
			case m*s.K <= 64:
				want = "tc:bm=16,bn=64,bk=128,wm=1,wn=4,stages=4,gm=8,minb=2,ov=2,sa=1,pl=1"
			default:
				want = "tc:bm=16,bn=64,bk=128,wm=1,wn=4,stages=4,gm=8,minb=2,ov=2,pl=1"
			}
			if hopper.String() != want {
				t.Errorf("%s M=%d (%.1f slots per expert, %d in all): Hopper picks %v, want %s", name, m, per, m*s.K, hopper, want)
			}
		}
	}
	// A narrow shape (E60 k4 H1536 I352: gemm1 704 columns wide) would run
	// 16×256 and 32×256 tiles in 180-tile waves of 132 multiprocessors,
	// the second a third full: 16×64 tiles instead (the H100 tune of the
	// shape picked them at every M up to 256, 1.09–1.16× faster than the
	// wider tiles). With 114 multiprocessors (an H100 PCIe) mixtral's gemm2
	// at M=64, 128 tiles of 32×256, would take two waves for 1.12.
	narrow := Shape{E: 60, K: 4, H: 1536, I: 352}
	for _, tt := range []struct {
		s    Shape
		sms  int
		m    int
		want string
	}{
		{narrow, 0, 64, "tc:bm=16,bn=64,bk=128,wm=1,wn=4,stages=4,gm=8,minb=2,ov=2,pl=1"},
		{narrow, 132, 256, "tc:bm=16,bn=64,bk=128,wm=1,wn=4,stages=4,gm=8,minb=2,ov=2,pl=1"},
		{narrow, 132, 16, "tc:bm=16,bn=64,bk=128,wm=1,wn=4,stages=4,gm=8,minb=2,ov=2,sa=1,pl=1"},
		{shapes["mixtral-8x7b"], 132, 64, "tc:bm=32,bn=256,bk=128,wm=1,wn=8,stages=3,gm=8,minb=1"},
		{shapes["mixtral-8x7b"], 114, 64, "tc:bm=16,bn=64,bk=128,wm=1,wn=4,stages=4,gm=8,minb=2,ov=2,pl=1"},
		{shapes["qwen3-30b-a3b"], 114, 64, "tc:bm=16,bn=256,bk=128,wm=1,wn=8,stages=3,gm=8,minb=1,ov=1"},
	} {
		if c := ChooseConfigFor(GPU{CC: Hopper, SMs: tt.sms}, tt.s, tt.m); c.String() != tt.want {
			t.Errorf("%v M=%d on %d multiprocessors: %v, want %s", tt.s, tt.m, tt.sms, c, tt.want)
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
			c := f.PickFor(sh, m, Uniform).Config
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

// sa=1 on a tc configuration fuses the alignment into gemm1: it reads back
// from its name, names its own module entry (TCSA) and gemm1 kernel, needs
// 64 threads, and means nothing to gemm2 (a split's gemm2 drops it; a tc
// gemm1 with it and the same tc gemm2 without are one configuration).
// SelfAligning makes it from a tc configuration where the batch allows.
func TestSelfAligningTC(t *testing.T) {
	tc16 := tcTable["16x256k128s3w8ov2"]
	sa := tc16
	sa.SA = 1
	back, err := ParseConfig(sa.String())
	if err != nil || back.String() != sa.String() || back.SA != 1 || !strings.Contains(sa.String(), ",sa=1") {
		t.Fatalf("ParseConfig(%q) = %v, %v", sa.String(), back, err)
	}
	if !strings.HasPrefix(sa.tcEntry(), "TCSA(") || strings.HasPrefix(tc16.tcEntry(), "TCSA(") {
		t.Errorf("module entries %s and %s: want TCSA for sa=1 only", sa.tcEntry(), tc16.tcEntry())
	}
	if g1, _ := sa.kernelNames(); !strings.HasSuffix(g1, "_sa") {
		t.Errorf("gemm1 kernel %s: want a _sa name", g1)
	}
	if got := Split(sa, tc16); got.IsSplit() || got.String() != sa.String() {
		t.Errorf("Split(%v, %v) = %v, want the one sa configuration", sa, tc16, got)
	}
	tc32 := tcTable["32x128k64s3b3"]
	if got := Split(tc32, sa); got.Gemm(2).SA != 0 {
		t.Errorf("Split(%v, %v) = %v: gemm2 keeps sa", tc32, sa, got)
	}
	small := tc(16, 64, 128, 1, 1, 3, 8, 1) // one warp: fewer threads than slots
	small.SA = 1
	if err := small.Validate(); err == nil {
		t.Errorf("%v: sa=1 with 32 threads accepted", small)
	}
	for _, bad := range []string{"tc:bm=16,bn=256,bk=128,wm=1,wn=8,stages=3,gm=8,minb=1,sa=2", "wg:nc=2,bn=256,stages=4,gm=8,sa=1"} {
		if c, err := ParseConfig(bad); err == nil {
			t.Errorf("ParseConfig(%q) = %v, want an error", bad, c)
		}
	}

	s := Shape{E: 128, K: 8, H: 2048, I: 768}
	for _, tt := range []struct {
		c    Config
		m    int
		want string // "" for none
	}{
		{tc16, 8, sa.String()},
		{tc16.WithProgrammatic(true, true), 4, sa.WithProgrammatic(true, true).String()},
		{Split(tc16, tc32), 2, Split(sa, tc32).String()},
		{tc16, 9, ""},                            // 72 slots
		{sa, 4, ""},                              // already fused
		{Config{Kernel: "skinny", NT: 1}, 1, ""}, // skinny's sa twins are candidates of their own
		{Split(Config{Kernel: "skinny", NT: 1}, tc16), 1, ""},
	} {
		got, ok := SelfAligning(tt.c, s, tt.m)
		if (tt.want == "") == ok || (ok && got.String() != tt.want) {
			t.Errorf("SelfAligning(%v, M=%d) = %v, %v; want %q", tt.c, tt.m, got, ok, tt.want)
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

// l2=4 puts an access policy window on each wg GEMM's launch over the rows
// it gathers (gemm1: x, gemm2: act); without it no launch has one, and a
// split windows only its l2=4 half.
func TestL2WindowLayout(t *testing.T) {
	s := Shape{E: 8, K: 2, H: 256, I: 128}
	windows := func(c Config) map[string]planBuf {
		l := newPlanLayout(s, 300, c, [2]int{132, 132})
		got := map[string]planBuf{}
		for _, ls := range l.launches {
			if ls.windowed {
				got[ls.kernel] = ls.window
			}
		}
		return got
	}
	c := withL2(wgTable["128x256s4tma"], 4)
	g1, g2 := c.kernelNames()
	got := windows(c)
	if len(got) != 2 || got[g1] != bufX || got[g2] != bufAct {
		t.Errorf("l2=4 windows %v, want %s over x and %s over act", got, g1, g2)
	}
	if l := newPlanLayout(s, 300, c, [2]int{132, 132}); l.windowBytes() != max(l.bytes[bufX], l.bytes[bufAct]) {
		t.Errorf("windowBytes %d, want the larger of x (%d) and act (%d)", l.windowBytes(), l.bytes[bufX], l.bytes[bufAct])
	}
	if got := windows(wgTable["128x256s4tma"]); len(got) != 0 {
		t.Errorf("l2=0 windows %v, want none", got)
	}
	split := Split(c, wgTable["64x256s4pptma"])
	g1, _ = split.Gemm(1).kernelNames()
	if got := windows(split); len(got) != 1 || got[g1] != bufX {
		t.Errorf("split with l2=4 gemm1: windows %v, want only %s over x", got, g1)
	}
}

// TrafficVariants gives a wg GEMM's L2-window and mc=2 twins (gemm1's,
// gemm2's, both), mc=2 only for a cooperative tensor-map GEMM with two
// n-tiles or more, and nothing for tc GEMMs.
func TestTrafficVariants(t *testing.T) {
	strs := func(cs []Config) []string {
		var out []string
		for _, c := range cs {
			if err := c.Validate(); err != nil {
				t.Errorf("%v: %v", c, err)
			}
			out = append(out, c.String())
		}
		return out
	}
	coop, pp, mc1 := wgTable["128x256s4tma"], wgTable["64x256s4pptma"], wgTable["128x256s4mc"]
	two := Shape{E: 8, K: 2, H: 512, I: 256} // gemm1: 2 n-tiles of 128, gemm2: 2 of 256
	got := strs(TrafficVariants(coop, two, 64))
	// A cooperative gemm1 (nc=2) gets no mc=2 twin (clusterOffered), its
	// gemm2 does; a 64-row one (nc=1) gets all three.
	want := strs([]Config{Split(withL2(coop, 4), coop), Split(coop, withL2(coop, 4)), withL2(coop, 4),
		Split(coop, mn(coop))})
	if !slices.Equal(got, want) {
		t.Errorf("cooperative tma:\n got %q\nwant %q", got, want)
	}
	one := wgTable["64x256s4tma"]
	got = strs(TrafficVariants(one, two, 64))
	want = strs([]Config{Split(withL2(one, 4), one), Split(one, withL2(one, 4)), withL2(one, 4),
		Split(mn(one), one), Split(one, mn(one)), mn(one)})
	if !slices.Equal(got, want) {
		t.Errorf("64-row tma:\n got %q\nwant %q", got, want)
	}
	// gemm1 one n-tile (I = 128): no mc=2 on it, nor on both.
	got = strs(TrafficVariants(coop, Shape{E: 8, K: 2, H: 512, I: 128}, 64))
	want = strs([]Config{Split(withL2(coop, 4), coop), Split(coop, withL2(coop, 4)), withL2(coop, 4), Split(coop, mn(coop))})
	if !slices.Equal(got, want) {
		t.Errorf("one gemm1 n-tile:\n got %q\nwant %q", got, want)
	}
	// mc=1 (weight multicast): its cluster twin (gemm2's) trades it for mc=2.
	if got := strs(TrafficVariants(mc1, two, 64)); len(got) != 4 || got[3] != Split(mc1, mn(coop)).String() {
		t.Errorf("mc=1: %q, want four twins ending in %v", got, Split(mc1, mn(coop)))
	}
	// Ping-pong: the window only.
	if got := strs(TrafficVariants(pp, two, 64)); len(got) != 3 || !strings.Contains(got[2], "l2=4") || strings.Contains(strings.Join(got, " "), "mc=2") {
		t.Errorf("ping-pong: %q, want the three l2=4 twins", got)
	}
	// A tc gemm1 with a wg gemm2: gemm2's twins only; a tc configuration,
	// or one already windowed and clustered: none.
	tc := tcTable["16x256k128s3w8"]
	vs := TrafficVariants(Split(tc, coop), two, 64)
	if len(vs) != 2 {
		t.Errorf("tc+wg: %v, want gemm2's window and mc=2 twins", vs)
	}
	for _, v := range vs {
		if v.Gemm(1).String() != tc.String() {
			t.Errorf("tc gemm1 changed: %v", v)
		}
	}
	for _, c := range []Config{tc, withL2(mn(coop), 4)} {
		if vs := TrafficVariants(c, two, 64); len(vs) != 0 {
			t.Errorf("%v: %v, want none", c, vs)
		}
	}
}

// gv=1 parses and prints, names its four kernels, runs 8 warps a block over
// GV_COLS1 (gemm1) or GV_COLS2 (gemm2) features, and is refused off nt=1,
// with w1/w2, and on other kernels; its constants are moe.cu's.
func TestGVConfig(t *testing.T) {
	for _, tt := range []struct{ in, g1, g2 string }{
		{"skinny:nt=1,gv=1", "moe_gemm1_skinny_nt1_gv", "moe_gemm2_skinny_nt1_gv"},
		{"skinny:nt=1,sa=1,fc=1,gv=1,pl=1", "moe_gemm1_skinny_nt1_gv_sa", "moe_gemm2_skinny_nt1_gv_fc"},
	} {
		c, err := ParseConfig(tt.in)
		if err != nil {
			t.Fatalf("%s: %v", tt.in, err)
		}
		if back, err := ParseConfig(c.String()); err != nil || back.String() != c.String() {
			t.Errorf("%s prints as %q, which parses as %v (%v)", tt.in, c, back, err)
		}
		if g1, g2 := c.kernelNames(); g1 != tt.g1 || g2 != tt.g2 {
			t.Errorf("%s: kernels %s, %s; want %s, %s", tt.in, g1, g2, tt.g1, tt.g2)
		}
		if c.Threads(1) != 256 || c.Threads(2) != 256 || c.Block() != 8 {
			t.Errorf("%s: %d and %d threads, blocks of %d tokens; want 256, 256, 8", tt.in, c.Threads(1), c.Threads(2), c.Block())
		}
	}
	for _, bad := range []string{"skinny:nt=2,gv=1", "skinny:nt=1,w1=16,gv=1", "skinny:nt=1,gv=2"} {
		if _, err := ParseConfig(bad); err == nil {
			t.Errorf("%s parses; want an error", bad)
		}
	}
	tc := tcTable["16x256k128s3w8"]
	tc.GV = 1
	if err := tc.Validate(); err == nil || !strings.Contains(err.Error(), "gv=1") {
		t.Errorf("tc with gv=1: %v", err)
	}
	// A split keeps gv to the GEMM that has it.
	sp := Split(Config{Kernel: "skinny", NT: 1, GV: 1, SA: 1}, Config{Kernel: "skinny", NT: 1, W2: 16, FC: 1})
	if g1, _ := sp.kernelNames(); !sp.IsSplit() || g1 != "moe_gemm1_skinny_nt1_gv_sa" || sp.G2.GV != 0 {
		t.Errorf("split %v: gemm1 %s", sp, g1)
	}
	// Grids: gemm1 over I in blocks of GV_COLS1 features, gemm2 over H in GV_COLS2.
	s := Shape{E: 8, K: 2, H: 200, I: 90}
	l := newPlanLayout(s, 3, Config{Kernel: "skinny", NT: 1, GV: 1, FC: 1}, [2]int{1, 1})
	g1, g2 := l.launches[len(l.launches)-2], l.launches[len(l.launches)-1]
	if g1.grid.X != (90+gvCols1-1)/gvCols1 || g2.grid.X != (200+gvCols2-1)/gvCols2 || g1.grid.Y != g2.grid.Y {
		t.Errorf("grids %v and %v", g1.grid, g2.grid)
	}
	if l.bytes[bufCombineCount] != int64(g2.grid.X)*4 {
		t.Errorf("combine counts %d bytes for %d column tiles", l.bytes[bufCombineCount], g2.grid.X)
	}
	for name, want := range map[string]int{"GV_WARPS": gvWarps, "GV_R2": gvCols2 / gvWarps} {
		m := regexp.MustCompile(`(?m)^#define ` + name + ` (\d+)$`).FindStringSubmatch(Source)
		if m == nil || m[1] != strconv.Itoa(want) {
			t.Errorf("moe.cu %s: %v, want %d (layout.go)", name, m, want)
		}
	}
}

func TestSlotWeightedLoad(t *testing.T) {
	r := routing.Routing{IDs: []int32{0, 0, 0, 1, routing.Empty, 2}, Weights: make([]float32, 6), M: 3, K: 2,
		Dropped: []bool{false, false, false, false, false, true}}
	// Counts 3 and 1 (the empty and the dropped slot left out): (9+1)/4.
	if got := SlotWeightedLoad(r, 4); got != 2.5 {
		t.Errorf("SlotWeightedLoad = %v, want 2.5", got)
	}
	if got := SlotWeightedLoad(routing.Routing{}, 4); got != 0 {
		t.Errorf("no slots: %v, want 0", got)
	}
}

// Under uniform routing the candidates are CandidatesFor's, exactly (the
// shipped batches' kernel versions depend on them); under zipf:1.2 the
// families of the hot experts' loads join: at deepseek-v3 tp8 M=256 the
// 64-row tc tiles and the wg kernels, which the uniform mean of 8 slots an
// expert leaves out.
func TestCandidatesUnder(t *testing.T) {
	h200 := GPU{CC: Hopper, SMs: 132}
	names := func(cs []Config) []string {
		var out []string
		for _, c := range cs {
			out = append(out, c.String())
		}
		return out
	}
	for _, s := range []Shape{{E: 128, K: 8, H: 2048, I: 768}, {E: 256, K: 8, H: 7168, I: 256}, {E: 8, K: 2, H: 4096, I: 14336}} {
		for _, m := range []int{1, 16, 256, 4096} {
			want := names(CandidatesFor(h200, s, m))
			if got := names(CandidatesUnder(h200, s, m, UniformRouting(m, s.E, s.K, 1))); strings.Join(got, " ") != strings.Join(want, " ") {
				t.Errorf("%v M=%d uniform: %d candidates, want CandidatesFor's %d", s, m, len(got), len(want))
			}
		}
	}
	ds := Shape{E: 256, K: 8, H: 7168, I: 256}
	uni := names(CandidatesFor(h200, ds, 256))
	zipf := names(CandidatesUnder(h200, ds, 256, ZipfRouting(256, ds.E, ds.K, 1.2, 1)))
	for _, c := range uni {
		if !slices.Contains(zipf, c) {
			t.Errorf("zipf M=256 lost the uniform candidate %s", c)
		}
	}
	count := func(g GPU, r routing.Routing, keep func(Config) bool) int {
		n := 0
		for _, c := range CandidatesUnder(g, ds, 256, r) {
			if keep(c) {
				n++
			}
		}
		return n
	}
	isWG := func(c Config) bool { return c.Kernel == "wg" }
	isTC64 := func(c Config) bool { return c.Kernel == "tc" && c.BM == 64 } // dominated on Hopper: an sm_80 list
	skewed, even := ZipfRouting(256, ds.E, ds.K, 1.2, 1), UniformRouting(256, ds.E, ds.K, 1)
	if count(h200, even, isWG) != 0 || count(h200, skewed, isWG) == 0 || count(GPU{CC: 80}, even, isTC64) != 0 || count(GPU{CC: 80}, skewed, isTC64) == 0 {
		t.Errorf("M=256: wg candidates uniform %d, zipf %d; 64-row tc on sm_80 uniform %d, zipf %d; want none under uniform, some under zipf",
			count(h200, even, isWG), count(h200, skewed, isWG), count(GPU{CC: 80}, even, isTC64), count(GPU{CC: 80}, skewed, isTC64))
	}
}
