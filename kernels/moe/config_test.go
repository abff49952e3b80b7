package moe

import (
	"strings"
	"testing"
)

func TestParseConfigTC(t *testing.T) {
	for _, tt := range []struct {
		in, want, wantErr string
	}{
		{in: "tc:128x256k64s3", want: "tc:bm=128,bn=256,bk=64,wm=2,wn=4,stages=3,gm=8,minb=1"},
		{in: "tc:bm=64,minb=2", want: "tc:bm=64,bn=128,bk=64,wm=2,wn=2,stages=4,gm=8,minb=2"},
		{in: "tc:bk=48", wantErr: "bk must be 32 or 64"},
		{in: "tc:bn=96,wn=1", wantErr: "bn must be 64 or a multiple of 128"},
		{in: "tc:bm=48", wantErr: "bm must be a multiple of 16·wm"},
		{in: "tc:wm=1,wn=1,bm=16,bn=64", wantErr: "loads cover 4 rows"},
		{in: "tc:stages=8,bm=256,wm=4", wantErr: "shared memory"},
		{in: "tc:gm=0", wantErr: "not key=positive integer"},
		{in: "tc:wgmma=1", wantErr: "unknown key"},
	} {
		t.Run(tt.in, func(t *testing.T) {
			c, err := ParseConfig(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("error %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || c.String() != tt.want {
				t.Fatalf("ParseConfig = %v, %v; want %s", c, err, tt.want)
			}
			// What a tuned result names parses back to the same configuration.
			again, err := ParseConfig(c.String())
			if err != nil || again != c {
				t.Errorf("ParseConfig(%q) = %+v, %v; want %+v", c.String(), again, err, c)
			}
		})
	}
}

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
