package moe

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mstar-dev/mstar/kernels/routing"
)

func TestBF16(t *testing.T) {
	tests := []struct {
		name string
		in   float32
		want uint16
	}{
		{"one", 1, 0x3f80},
		{"minus two", -2, 0xc000},
		{"tie rounds to even (down)", 1 + 1.0/256, 0x3f80},
		{"tie rounds to even (up)", 1 + 3.0/256, 0x3f82},
		{"above tie rounds up", 1 + 1.0/256 + 1.0/4096, 0x3f81},
		{"overflow to inf", math.MaxFloat32, 0x7f80},
		{"zero", 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := F32ToBF16(tt.in); got != tt.want {
				t.Errorf("F32ToBF16(%v) = %#04x, want %#04x", tt.in, got, tt.want)
			}
		})
	}
	if got := BF16ToF32(F32ToBF16(float32(math.NaN()))); !math.IsNaN(float64(got)) {
		t.Errorf("NaN round trip = %v, want NaN", got)
	}
	if got := BF16ToF32(BF16NaN); !math.IsNaN(float64(got)) {
		t.Errorf("BF16NaN widens to %v, want NaN", got)
	}
}

// TestGeneratorGolden pins the counter-based generator: scripts/peers
// regenerates the same weights from the same formula and checks these values.
func TestGeneratorGolden(t *testing.T) {
	tests := []struct {
		name         string
		seed, stream uint64
		idx          uint64
		fanIn        int
	}{
		{name: "w1 seed 1 idx 0", seed: 1, stream: streamW1, idx: 0, fanIn: 2048},
		{name: "w2 seed 1 idx 12345", seed: 1, stream: streamW2, idx: 12345, fanIn: 768},
		{name: "x seed 7 idx 3", seed: 7, stream: streamX, idx: 3, fanIn: 0},
	}
	// Values computed once by this code and by scripts/peers/moe_peers.py's
	// pure-python generator (python3 scripts/peers/moe_peers.py --selftest).
	golden := map[string][2]uint64{
		"w1 seed 1 idx 0":     {0x01d60447fea35413, 0xbd1b},
		"w2 seed 1 idx 12345": {0x72a5d5795965211d, 0xbbd6},
		"x seed 7 idx 3":      {0x7bf0ffc2ab3b7e72, 0xbd02},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			scale := float32(1.0 / (1 << 24))
			if tt.fanIn > 0 {
				scale = scaleFor(tt.fanIn)
			}
			gotR := counterRand(tt.seed, tt.stream, tt.idx)
			gotB := uniformBF16(tt.seed, tt.stream, tt.idx, scale)
			want := golden[tt.name]
			if gotR != want[0] || uint64(gotB) != want[1] {
				t.Errorf("rand=%#x bf16=%#04x, want rand=%#x bf16=%#04x", gotR, gotB, want[0], want[1])
			}
		})
	}
}

func TestNewLayerDeterministicAndBounded(t *testing.T) {
	s := Shape{E: 3, K: 2, H: 64, I: 48}
	a, b := NewLayer(s, 5), NewLayer(s, 5)
	if !slices.Equal(a.W1, b.W1) || !slices.Equal(a.W2, b.W2) {
		t.Fatal("NewLayer with the same seed gave different weights")
	}
	c := NewLayer(s, 6)
	if slices.Equal(a.W1, c.W1) {
		t.Fatal("NewLayer with different seeds gave the same W1")
	}
	bound := math.Sqrt(3.0/float64(s.H)) * 1.01
	zeros := 0
	for _, w := range a.W1 {
		v := float64(BF16ToF32(w))
		if math.Abs(v) > bound {
			t.Fatalf("W1 value %v outside ±%v", v, bound)
		}
		if v == 0 {
			zeros++
		}
	}
	if zeros > len(a.W1)/100 {
		t.Errorf("%d of %d W1 values are zero: the generator is broken", zeros, len(a.W1))
	}
	x := RandomInput(4, s.H, 1)
	for _, v := range x {
		if v != RoundBF16(v) || math.Abs(float64(v)) > 1 {
			t.Fatalf("input %v is not a bf16 value in ±1", v)
		}
	}
}

// tinyLayer builds E=2, H=2, I=1 by hand:
//
//	expert 0: gate [1 0], up [0 2], W2 [[1] [-1]]
//	expert 1: gate [0 1], up [1 1], W2 [[2] [0.5]]
func tinyLayer() *Layer {
	f := func(v ...float32) []uint16 {
		b := make([]uint16, len(v))
		ToBF16(b, v)
		return b
	}
	return &Layer{
		Shape: Shape{E: 2, K: 2, H: 2, I: 1},
		W1:    f(1, 0, 0, 2 /* expert 1 */, 0, 1, 1, 1),
		W2:    f(1, -1 /* expert 1 */, 2, 0.5),
	}
}

func TestReferenceTinyByHand(t *testing.T) {
	silu1 := 1 / (1 + math.Exp(-1)) // silu(1) = 0.7310585786300049
	tests := []struct {
		name string
		x    []float32
		r    routing.Routing
		want []float64
	}{
		{
			// x=[1 1]. Expert 0: g=1, u=2, act=2·silu(1)=1.4621; y=[1.4621 -1.4621].
			// Expert 1: g=1, u=2, act=1.4621; y=[2.9242 0.7311].
			// out = 0.25·y0 + 0.75·y1 = [0.3655+2.1932, -0.3655+0.5483] = [2.5587 0.1828].
			name: "k=2 both experts",
			x:    []float32{1, 1},
			r:    routing.Routing{IDs: []int32{0, 1}, Weights: []float32{0.25, 0.75}, M: 1, K: 2},
			want: []float64{0.25*2*silu1 + 0.75*2*2*silu1, -0.25*2*silu1 + 0.75*0.5*2*silu1},
		},
		{
			// Token 0: x=[2 -1] to expert 1 (weight 1): g=-1, u=1, act=silu(-1)=-0.2689;
			// y=[2·act, 0.5·act] = [-0.5379 -0.1345].
			// Token 1: x=[0.5 3] to expert 0 (weight 0.5): g=0.5, u=6, act=6·silu(0.5)=3.7754;
			// y=[3.7754 -3.7754], times 0.5 = [1.8877 -1.8877].
			name: "k=1 two tokens",
			x:    []float32{2, -1, 0.5, 3},
			r:    routing.Routing{IDs: []int32{1, 0}, Weights: []float32{1, 0.5}, M: 2, K: 1},
			want: []float64{
				2 * (-1 / (1 + math.Exp(1))), 0.5 * (-1 / (1 + math.Exp(1))),
				0.5 * 6 * (0.5 / (1 + math.Exp(-0.5))), -0.5 * 6 * (0.5 / (1 + math.Exp(-0.5))),
			},
		},
		{
			// The slot of expert 0 lives on another rank: only expert 1 counts.
			name: "dropped slot contributes nothing",
			x:    []float32{1, 1},
			r:    routing.Routing{IDs: []int32{routing.Empty, 1}, Weights: []float32{0.25, 0.75}, M: 1, K: 2},
			want: []float64{0.75 * 2 * 2 * silu1, 0.75 * 0.5 * 2 * silu1},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := tinyLayer()
			l.Shape.K = tt.r.K
			got := Reference(l, tt.x, tt.r)
			for i := range tt.want {
				if math.Abs(got[i]-tt.want[i]) > 1e-12 {
					t.Errorf("out[%d] = %.15g, want %.15g", i, got[i], tt.want[i])
				}
			}
			// ForwardCPU rounds the intermediate to bf16, as the GPU does.
			cpu := make([]float32, len(tt.want))
			ForwardCPU(l, tt.x, tt.r, cpu)
			want := referenceTokens(l, tt.x, tt.r, allTokens(tt.r.M), true)
			if e := RelL2(cpu, want); !(e < 1e-6) {
				t.Errorf("ForwardCPU = %v, want %v (rel L2 %g)", cpu, want, e)
			}
		})
	}
}

func TestForwardCPUMatchesReference(t *testing.T) {
	tests := []struct {
		name    string
		shape   Shape
		m       int
		routing string
		ep      int
		long    bool
	}{
		{name: "tiny odd", shape: Shape{E: 3, K: 2, H: 5, I: 3}, m: 7},
		{name: "one token", shape: Shape{E: 16, K: 4, H: 96, I: 40}, m: 1},
		{name: "odd shape M=1", shape: Shape{E: 60, K: 4, H: 1536, I: 352}, m: 1},
		{name: "odd shape M=37 zipf", shape: Shape{E: 60, K: 4, H: 1536, I: 352}, m: 37, routing: "zipf:1.2"},
		{name: "expert parallel", shape: Shape{E: 8, K: 3, H: 64, I: 40}, m: 50, ep: 2},
		{name: "odd shape M=3001", shape: Shape{E: 60, K: 4, H: 1536, I: 352}, m: 3001, long: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.long && testing.Short() {
				t.Skip("large shape: skipped with -short")
			}
			globalE := tt.shape.E
			shape := tt.shape
			if tt.ep > 1 {
				shape.E /= tt.ep
			}
			l := NewLayer(shape, 11)
			x := RandomInput(tt.m, shape.H, 12)
			var r routing.Routing
			if tt.routing != "" {
				alpha, err := ParseRoutingSpec(tt.routing)
				if err != nil {
					t.Fatal(err)
				}
				r = ZipfRouting(tt.m, globalE, shape.K, alpha, 13)
			} else {
				r = UniformRouting(tt.m, globalE, shape.K, 13)
			}
			r = r.Localize(globalE, max(tt.ep, 1), 0)
			if err := r.Validate(shape.E); err != nil {
				t.Fatal(err)
			}
			got := make([]float32, tt.m*shape.H)
			ForwardCPU(l, x, r, got)
			tokens := sampleTokens(tt.m, 64)
			sub := make([]float32, 0, len(tokens)*shape.H)
			for _, tok := range tokens {
				sub = append(sub, got[tok*shape.H:(tok+1)*shape.H]...)
			}
			// Against the reference that rounds the intermediate as
			// ForwardCPU does, only float32 sums differ; against the exact
			// one, the bf16 intermediate's error too.
			if e := RelL2(sub, referenceTokens(l, x, r, tokens, true)); !(e < cpuRefTol) {
				t.Errorf("rel L2 error of ForwardCPU against the bf16-intermediate reference = %g, want < %g", e, cpuRefTol)
			}
			if e := RelL2(sub, ReferenceTokens(l, x, r, tokens)); !(e < 1e-2) {
				t.Errorf("rel L2 error of ForwardCPU against Reference = %g, want < 1e-2", e)
			}
		})
	}
}

// sampleTokens is every token up to n, else n spread over [0, m) including both ends.
func sampleTokens(m, n int) []int {
	if m <= n {
		out := make([]int, m)
		for i := range out {
			out[i] = i
		}
		return out
	}
	out := make([]int, n)
	for i := range out {
		out[i] = i * (m - 1) / (n - 1)
	}
	return out
}

func TestRelL2(t *testing.T) {
	tests := []struct {
		name string
		got  []float32
		want []float64
		ok   func(float64) bool
	}{
		{"equal", []float32{1, 2}, []float64{1, 2}, func(e float64) bool { return e == 0 }},
		{"ten percent", []float32{1.1, 0}, []float64{1, 0}, func(e float64) bool { return math.Abs(e-0.1) < 1e-6 }},
		{"nan fails", []float32{float32(math.NaN()), 1}, []float64{1, 1}, func(e float64) bool { return !(e <= 1e-2) }},
		{"length mismatch", []float32{1}, []float64{1, 1}, func(e float64) bool { return math.IsInf(e, 1) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if e := RelL2(tt.got, tt.want); !tt.ok(e) {
				t.Errorf("RelL2 = %v", e)
			}
		})
	}
}

// checkAlignment verifies the invariants every consumer of an Alignment
// relies on, and returns each expert's slots sorted.
func checkAlignment(t *testing.T, a Alignment, ids []int32, e int) [][]int32 {
	t.Helper()
	if len(a.Offsets) != e+1 || a.Offsets[0] != 0 {
		t.Fatalf("offsets %v: want %d entries starting at 0", a.Offsets, e+1)
	}
	groups := make([][]int32, e)
	for ex := 0; ex < e; ex++ {
		lo, hi := a.Offsets[ex], a.Offsets[ex+1]
		if lo%int32(a.Block) != 0 || hi < lo {
			t.Fatalf("expert %d: group [%d,%d) not aligned to %d", ex, lo, hi, a.Block)
		}
		padded := (a.Counts[ex] + int32(a.Block) - 1) / int32(a.Block) * int32(a.Block)
		if hi-lo != padded {
			t.Fatalf("expert %d: group of %d rows for %d slots, want %d", ex, hi-lo, a.Counts[ex], padded)
		}
		for b := lo / int32(a.Block); b < hi/int32(a.Block); b++ {
			if a.BlockExpert[b] != int32(ex) {
				t.Fatalf("block %d: expert %d, want %d", b, a.BlockExpert[b], ex)
			}
		}
		for i := lo; i < hi; i++ {
			s := a.SortedSlots[i]
			if i-lo < a.Counts[ex] {
				if s < 0 || s >= a.Pad || ids[s] != int32(ex) {
					t.Fatalf("expert %d row %d: slot %d does not go to this expert", ex, i, s)
				}
				groups[ex] = append(groups[ex], s)
			} else if s != a.Pad {
				t.Fatalf("expert %d row %d: padding holds %d, want %d", ex, i, s, a.Pad)
			}
		}
		slices.Sort(groups[ex])
	}
	if len(a.BlockExpert)*a.Block != a.Total() {
		t.Fatalf("%d blocks of %d for %d rows", len(a.BlockExpert), a.Block, a.Total())
	}
	n := 0
	for _, id := range ids {
		if id >= 0 {
			n++
		}
	}
	if got := MaxAlignedRows(n, e, a.Block); a.Total() > got {
		t.Fatalf("padded total %d exceeds MaxAlignedRows %d", a.Total(), got)
	}
	return groups
}

func TestAlign(t *testing.T) {
	tests := []struct {
		name  string
		ids   []int32
		e     int
		block int
		want  [][]int32 // slots per expert
	}{
		{"expert with no tokens", []int32{0, 2, 2, 0, 2}, 3, 4, [][]int32{{0, 3}, nil, {1, 2, 4}}},
		{"all tokens on one expert", []int32{1, 1, 1, 1, 1, 1, 1, 1, 1}, 4, 4, [][]int32{nil, {0, 1, 2, 3, 4, 5, 6, 7, 8}, nil, nil}},
		{"block of one", []int32{3, 0, 1}, 4, 1, [][]int32{{1}, {2}, nil, {0}}},
		{"dropped slots", []int32{routing.Empty, 1, routing.Empty, 0}, 2, 2, [][]int32{{3}, {1}}},
		{"nothing routed", []int32{routing.Empty, routing.Empty}, 2, 8, [][]int32{nil, nil}},
		{"exact multiple", []int32{0, 0, 1, 1}, 2, 2, [][]int32{{0, 1}, {2, 3}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := Align(tt.ids, tt.e, tt.block)
			got := checkAlignment(t, a, tt.ids, tt.e)
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("groups (-want +got):\n- %v\n+ %v", tt.want, got)
			}
		})
	}
	// Random routings at the kernels' block sizes keep every invariant.
	for _, block := range []int{8, 16, 64} {
		r := UniformRouting(333, 60, 4, uint64(block))
		checkAlignment(t, Align(r.IDs, 60, block), r.IDs, 60)
	}
}

func TestRouting(t *testing.T) {
	for _, tt := range []struct {
		name    string
		r       routing.Routing
		e       int
		skewMin float64 // hottest expert's share of slots at least this
	}{
		{"uniform", UniformRouting(2000, 32, 4, 1), 32, 0},
		{"zipf 1.2", ZipfRouting(2000, 32, 4, 1.2, 1), 32, 0.1},
		{"k equals E", UniformRouting(10, 5, 5, 2), 5, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.r.Validate(tt.e); err != nil {
				t.Fatal(err)
			}
			counts := make([]int, tt.e)
			for m := 0; m < tt.r.M; m++ {
				row := slices.Clone(tt.r.IDs[m*tt.r.K : (m+1)*tt.r.K])
				slices.Sort(row)
				if len(slices.Compact(row)) != tt.r.K {
					t.Fatalf("token %d: repeated experts %v", m, tt.r.IDs[m*tt.r.K:(m+1)*tt.r.K])
				}
				var sum float64
				for j := 0; j < tt.r.K; j++ {
					w := tt.r.Weights[m*tt.r.K+j]
					if !(w > 0) {
						t.Fatalf("token %d: weight %v not positive", m, w)
					}
					sum += float64(w)
					counts[tt.r.IDs[m*tt.r.K+j]]++
				}
				if math.Abs(sum-1) > 1e-5 {
					t.Fatalf("token %d: weights sum to %v, want 1", m, sum)
				}
			}
			hot := float64(slices.Max(counts)) / float64(tt.r.M*tt.r.K)
			if hot < tt.skewMin {
				t.Errorf("hottest expert has %.3f of the slots, want at least %.3f", hot, tt.skewMin)
			}
			if tt.skewMin == 0 && tt.r.M > 100 && hot > 3.0/float64(tt.e) {
				t.Errorf("uniform routing: hottest expert has %.3f of the slots (1/E = %.3f)", hot, 1/float64(tt.e))
			}
		})
	}
	a, b := UniformRouting(50, 16, 2, 9), UniformRouting(50, 16, 2, 9)
	if !slices.Equal(a.IDs, b.IDs) || !slices.Equal(a.Weights, b.Weights) {
		t.Error("same seed gave different routings")
	}
}

func TestLocalize(t *testing.T) {
	r := routing.Routing{IDs: []int32{0, 5, 3, 4}, Weights: []float32{.1, .2, .3, .4}, M: 2, K: 2}
	got := r.Localize(8, 2, 1) // rank 1 owns 4..7
	want := []int32{routing.Empty, 1, routing.Empty, 0}
	if !slices.Equal(got.IDs, want) {
		t.Errorf("Localize ids (-want +got):\n- %v\n+ %v", want, got.IDs)
	}
	if got.Slots() != 2 || got.Touched(4) != 2 {
		t.Errorf("Slots=%d Touched=%d, want 2 and 2", got.Slots(), got.Touched(4))
	}
}

func TestShapes(t *testing.T) {
	got, err := Shape{E: 256, K: 8, H: 7168, I: 2048}.Shard(8, 1)
	if want := (Shape{E: 256, K: 8, H: 7168, I: 256}); err != nil || got != want {
		t.Errorf("deepseek-v3 --tp 8 = %v, %v; want %v", got, err, want)
	}
	for _, tt := range []struct {
		name    string
		shape   Shape
		tp, ep  int
		wantErr string
	}{
		{"k > E", Shape{E: 4, K: 5, H: 8, I: 8}, 1, 1, "top-k 5 is larger than the number of experts 4"},
		{"zero hidden", Shape{E: 4, K: 2, H: 0, I: 8}, 1, 1, "hidden must be positive"},
		{"tp does not divide I", Shape{E: 4, K: 2, H: 8, I: 12}, 5, 1, "--tp 5 does not divide the intermediate size 12"},
		{"ep does not divide E", Shape{E: 6, K: 2, H: 8, I: 8}, 1, 4, "--ep 4 does not divide the number of experts 6"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tt.shape.Shard(tt.tp, tt.ep)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("Shard error = %v, want it to contain %q", err, tt.wantErr)
			}
		})
	}
}

func TestFlopsAndBytes(t *testing.T) {
	s := Shape{E: 4, K: 2, H: 8, I: 4}
	// Per slot: W1 2·8·8=128, W2 2·4·8=64, SiLU·mul 4·4=16, scale 8, combine 8.
	if got, want := s.Flops(3), 3.0*(128+64+16+8+8); got != want {
		t.Errorf("Flops(3) = %v, want %v", got, want)
	}
	// Two experts of 3·4·8·2 = 192 bytes, x and out 2·5·8·2 = 160, ids+weights 3·8.
	if got, want := s.Bytes(5, 2, 3), 2.0*192+160+24; got != want {
		t.Errorf("Bytes = %v, want %v", got, want)
	}
}

func TestRepeat(t *testing.T) {
	r := routing.Routing{IDs: []int32{0, 3}, Weights: []float32{0.5, 0.5}, M: 1, K: 2}
	if rep := r.Repeat(3); rep.M != 3 || rep.IDs[4] != 0 || rep.IDs[5] != 3 || rep.Weights[5] != 0.5 {
		t.Errorf("Repeat(3) = %+v", rep)
	}
}

func TestParseRoutingSpec(t *testing.T) {
	for _, tt := range []struct {
		in      string
		want    float64
		wantErr bool
	}{
		{"uniform", 0, false}, {"", 0, false}, {"zipf:1.5", 1.5, false},
		{"zipf:0", 0, true}, {"zipf:x", 0, true}, {"pareto", 0, true},
	} {
		got, err := ParseRoutingSpec(tt.in)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("ParseRoutingSpec(%q) = %v, %v", tt.in, got, err)
		}
	}
}

func TestParseConfig(t *testing.T) {
	for _, tt := range []struct {
		in, want, wantErr string
	}{
		{in: "auto", want: "auto"},
		{in: "skinny:nt=2", want: "skinny:nt=2"},
		{in: "tiled:m64", want: "tiled:m64"},
		{in: "tiled:bm=128,wn=4", want: "tiled:bm=128,bn=128,bk=32,wm=2,wn=4,stages=4"},
		{in: "skinny:nt=3", wantErr: "nt must be 1, 2 or 4"},
		{in: "tiled:bm=24", wantErr: "bm must be a multiple of 16·wm"},
		{in: "tiled:bn=64,wn=4", wantErr: "bn must be a multiple of 32·wn"},
		{in: "tiled:stages=20", wantErr: "shared memory"},
		{in: "tiled:bq=1", wantErr: "unknown key"},
		{in: "wgmma", wantErr: "want auto"},
		{in: "tc:128x256k64s3", want: "tc:bm=128,bn=256,bk=64,wm=2,wn=4,stages=3,gm=8,minb=1"},
		{in: "tc:bm=64,minb=2", want: "tc:bm=64,bn=128,bk=64,wm=2,wn=2,stages=4,gm=8,minb=2"},
		{in: "tc:bk=48", wantErr: "bk must be 32, 64 or 128"},
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
	if d := (Config{Kernel: "tiled", Tile: "custom", BM: 32, BN: 64, BK: 32, WM: 1, WN: 2, Stages: 3}).Defines(); len(d) != 6 || d[0] != "-DTL_BM=32" {
		t.Errorf("Defines = %v", d)
	}
	// The decode kernel for one token, 128-token tiles for thousands.
	if c := ChooseConfig(Shape{E: 128, K: 8, H: 2048, I: 768}, 1); c.Kernel != "skinny" {
		t.Errorf("M=1 picks %v, want skinny", c)
	}
	if c := ChooseConfig(Shape{E: 256, K: 8, H: 7168, I: 256}, 1); c.W1 != 16 || c.W2 != 4 {
		t.Errorf("deepseek-v3 tp8 M=1 picks %v, want 16-warp split-K for gemm1 only", c)
	}
	if c := ChooseConfig(Shape{E: 128, K: 8, H: 2048, I: 768}, 4096); c.BM != 128 {
		t.Errorf("M=4096 picks %v, want 128-token tiles", c)
	}
}

func TestRotationCopies(t *testing.T) {
	for _, tt := range []struct {
		touched, l2 int64
		want        int
	}{
		{75 << 20, 50 << 20, 2}, {10 << 20, 50 << 20, 8}, {1 << 30, 50 << 20, 1}, {0, 50 << 20, 1},
	} {
		if got := RotationCopies(tt.touched, tt.l2, 8); got != tt.want {
			t.Errorf("RotationCopies(%d, %d) = %d, want %d", tt.touched, tt.l2, got, tt.want)
		}
	}
}

func TestStageName(t *testing.T) {
	for kernel, want := range map[string]string{
		"moe_align": "align", "moe_gemm1_tc_128_256_64_2_4_3_8_1": "gemm1", "moe_gemm2_skinny_nt1_w4": "gemm2",
		"moe_combine": "combine", "other": "other",
	} {
		if got := StageName(kernel); got != want {
			t.Errorf("StageName(%q) = %q, want %q", kernel, got, want)
		}
	}
	// Every kernel of every plan maps to one of the four stages.
	for _, c := range append(TCConfigs(), Config{Kernel: "skinny", NT: 1}, tiledTable["m64"]) {
		l := newPlanLayout(Shape{E: 8, K: 2, H: 256, I: 128}, 40, c, [2]int{4, 4})
		var got []string
		for _, ln := range l.launches {
			got = append(got, StageName(ln.kernel))
		}
		if strings.Join(got, ",") != "align,gemm1,gemm2,combine" {
			t.Errorf("%v: stages %v", c, got)
		}
	}
	// Many slots: the alignment's three kernels are one stage.
	l := newPlanLayout(Shape{E: 8, K: 8, H: 256, I: 128}, 4096, tcTable["128x256k64s3"], [2]int{4, 4})
	var got []string
	for _, ln := range l.launches {
		got = append(got, StageName(ln.kernel))
	}
	if strings.Join(got, ",") != "align,align,align,gemm1,gemm2,combine" {
		t.Errorf("M=4096 k=8: stages %v", got)
	}
}

// Expert e gets e+1 tokens (1 to 9): every kernel of the CPU path runs —
// one and two tokens read bf16 directly, more widen the tile, and the
// remainders of 1, 2 and 3 after groups of four take their own kernels.
func TestForwardCPUTokensPerExpert(t *testing.T) { checkTokensPerExpert(t) }

// cpuRefTol bounds ForwardCPU's rel L2 error against the reference that
// rounds the intermediate to bf16 as it does: float32 sums in another
// order, and the rare intermediate that their rounding error tips to the
// neighbouring bf16 (M=3001 of an odd shape: 1.8e-5).
const cpuRefTol = 1e-4

func allTokens(m int) []int {
	t := make([]int, m)
	for i := range t {
		t[i] = i
	}
	return t
}

func checkTokensPerExpert(t *testing.T) {
	t.Helper()
	s := Shape{E: 9, K: 1, H: 67, I: 37} // odd: the row tails too
	var ids []int32
	for e := 0; e < s.E; e++ {
		for range e + 1 {
			ids = append(ids, int32(e))
		}
	}
	m := len(ids)
	r := routing.Routing{IDs: ids, Weights: make([]float32, m), M: m, K: 1}
	for i := range r.Weights {
		r.Weights[i] = 0.5 + float32(i%3)/4
	}
	l := NewLayer(s, 21)
	x := RandomInput(m, s.H, 22)
	got := make([]float32, m*s.H)
	ForwardCPU(l, x, r, got)
	tokens := make([]int, m)
	for i := range tokens {
		tokens[i] = i
	}
	want := referenceTokens(l, x, r, tokens, true)
	for e, first := 0, 0; e < s.E; first, e = first+e+1, e+1 {
		lo, hi := first*s.H, (first+e+1)*s.H
		if err := RelL2(got[lo:hi], want[lo:hi]); !(err < cpuRefTol) {
			t.Errorf("expert %d (%d tokens): rel L2 %g against the reference", e, e+1, err)
		}
	}
}

// moe.cu's ALIGN_CHUNK is the Go side's alignChunk: the layout sizes the
// multi-block alignment's grid and count buffer from it.
func TestAlignChunkMatchesSource(t *testing.T) {
	if want := fmt.Sprintf("#define ALIGN_CHUNK %d\n", alignChunk); !strings.Contains(Source, want) {
		t.Errorf("moe.cu does not say %q", strings.TrimSpace(want))
	}
}

// ForwardCPUTimed gives ForwardCPU's result bit for bit, and stage times
// that fit inside the pass.
func TestForwardCPUTimed(t *testing.T) {
	s := Shape{E: 8, K: 2, H: 64, I: 40}
	l := NewLayer(s, 3)
	x := RandomInput(20, s.H, 4)
	r := UniformRouting(20, s.E, s.K, 5)
	want := make([]float32, 20*s.H)
	ForwardCPU(l, x, r, want)
	got := make([]float32, len(want))
	t0 := time.Now()
	st := ForwardCPUTimed(l, x, r, got)
	wall := time.Since(t0)
	if !slices.Equal(got, want) {
		t.Errorf("ForwardCPUTimed's output differs from ForwardCPU's")
	}
	sum := st.Align + st.GEMM1 + st.GEMM2 + st.Combine
	for _, d := range []time.Duration{st.Align, st.GEMM1, st.GEMM2, st.Combine} {
		if d < 0 {
			t.Errorf("negative stage time in %+v", st)
		}
	}
	if sum > wall {
		t.Errorf("stages sum to %v, more than the pass's %v", sum, wall)
	}
}
