package moe

import (
	"math"
	"math/rand/v2"
	"testing"
)

// The AVX2 kernels give the pure Go loops' dot products (to float32
// rounding: they sum in another order) at every length, tails included.
func TestDotAVX2MatchesGo(t *testing.T) {
	if !useAVX2 {
		t.Skip("this CPU has no AVX2+FMA: the Go loops are the only path")
	}
	rng := rand.New(rand.NewPCG(1, 2))
	bf := func(n int) []uint16 {
		v := make([]uint16, n)
		for i := range v {
			v[i] = F32ToBF16(float32(rng.NormFloat64()))
		}
		return v
	}
	f := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(rng.NormFloat64())
		}
		return v
	}
	near := func(a, b float32, n int) bool {
		return math.Abs(float64(a-b)) <= 1e-5*math.Sqrt(float64(n))*math.Max(1, math.Abs(float64(b)))+1e-6
	}
	for _, n := range []int{0, 1, 7, 8, 9, 15, 16, 17, 40, 352, 2048, 2051} {
		a0, a1, a2, a3, x, y := bf(n), bf(n), bf(n), bf(n), f(n), f(n)
		z, u := f(n), f(n)
		useAVX2 = false
		w0, w1, w2, w3 := dot4bf16(a0, a1, a2, a3, x)
		p0, p1 := dot2x2bf16(a0, a1, x, y)
		k0, k1 := dot2x4bf16(a0, a1, x, y, z, u)
		useAVX2 = true
		g0, g1, g2, g3 := dot4bf16(a0, a1, a2, a3, x)
		q0, q1 := dot2x2bf16(a0, a1, x, y)
		m0, m1 := dot2x4bf16(a0, a1, x, y, z, u)
		pairs := [][2]float32{{g0, w0}, {g1, w1}, {g2, w2}, {g3, w3}, {q0[0], p0[0]}, {q0[1], p0[1]}, {q1[0], p1[0]}, {q1[1], p1[1]}}
		for j := range 4 {
			pairs = append(pairs, [2]float32{m0[j], k0[j]}, [2]float32{m1[j], k1[j]})
		}
		for i, pair := range pairs {
			if !near(pair[0], pair[1], n) {
				t.Errorf("n=%d: sum %d: AVX2 %v, Go %v", n, i, pair[0], pair[1])
			}
		}
	}
}

// The AVX512-BF16 kernel gives the Go loop's sixteen dot products at every
// length, tails included: bf16 products are exact in float32, so only the
// order of the sums differs.
func TestDot4x4AVX512MatchesGo(t *testing.T) {
	if !useAVX512BF16 {
		t.Skip("this CPU has no AVX512-BF16: groups of tokens take the AVX2 or Go kernels")
	}
	defer func(v bool) { useAVX512BF16 = v }(useAVX512BF16)
	rng := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int{0, 1, 31, 32, 33, 64, 95, 768, 2048, 2051} {
		var a, b [4][]uint16
		for i := range 4 {
			a[i], b[i] = make([]uint16, n), make([]uint16, n)
			for j := range n {
				a[i][j] = F32ToBF16(float32(rng.NormFloat64()))
				b[i][j] = F32ToBF16(float32(rng.NormFloat64()))
			}
		}
		useAVX512BF16 = false
		want := dot4x4bf16(&a, &b)
		useAVX512BF16 = true
		got := dot4x4bf16(&a, &b)
		for i := range got {
			if math.Abs(float64(got[i]-want[i])) > 1e-5*math.Sqrt(float64(n))*math.Max(1, math.Abs(float64(want[i])))+1e-6 {
				t.Errorf("n=%d: sum %d (row %d, token %d): AVX512 %v, Go %v", n, i, i/4, i%4, got[i], want[i])
			}
		}
	}
}

// Each path a CPU may take passes the tokens-per-expert check: AVX2
// without AVX512-BF16, and the Go loops (CPUs without AVX2).
func TestForwardCPUKernelPaths(t *testing.T) {
	defer func(a, b bool) { useAVX2, useAVX512BF16 = a, b }(useAVX2, useAVX512BF16)
	for _, p := range []struct {
		name        string
		avx2, bf16x bool
	}{{"avx2", true, false}, {"go", false, false}} {
		if p.avx2 && !cpuHasAVX2() {
			continue
		}
		useAVX2, useAVX512BF16 = p.avx2, p.bf16x
		t.Run(p.name, checkTokensPerExpert)
	}
}

// FromBF16's AVX2 widening is exact, tails included.
func TestFromBF16AVX2(t *testing.T) {
	if !useAVX2 {
		t.Skip("this CPU has no AVX2+FMA")
	}
	for _, n := range []int{0, 1, 15, 16, 17, 33, 1000} {
		src := make([]uint16, n)
		for i := range src {
			src[i] = uint16(i*7919 + 13)
		}
		got := make([]float32, n)
		FromBF16(got, src)
		for i, v := range src {
			if math.Float32bits(got[i]) != uint32(v)<<16 {
				t.Fatalf("n=%d: dst[%d] bits %#x, want %#x", n, i, math.Float32bits(got[i]), uint32(v)<<16)
			}
		}
	}
}

// BenchmarkDot4bf16 compares the AVX2 and Go kernels on one 2048-long
// group of four rows (qwen3-30b-a3b's W1 rows).
func BenchmarkDot4bf16(b *testing.B) {
	n := 2048
	rows := [4][]uint16{}
	for i := range rows {
		rows[i] = make([]uint16, n)
	}
	x := make([]float32, n)
	for _, avx := range []bool{false, true} {
		if avx && !cpuHasAVX2() {
			continue
		}
		name := "go"
		if avx {
			name = "avx2"
		}
		b.Run(name, func(b *testing.B) {
			old := useAVX2
			useAVX2 = avx
			defer func() { useAVX2 = old }()
			b.SetBytes(int64(4 * n * 2))
			for b.Loop() {
				dot4bf16(rows[0], rows[1], rows[2], rows[3], x)
			}
		})
	}
}
