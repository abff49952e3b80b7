package moe

import (
	"fmt"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mstar-dev/mstar/kernels/routing"
)

// Row-block sizes of the CPU path. With AVX512-BF16 (VDPBF16PS) groups of
// four bf16 token rows meet four bf16 weight rows with no widening at all;
// with AVX2 the kernels widen bf16 weights as they load them; either way a
// block's rows stay in the core's cache while the expert's token groups
// stream past them. Without either (the Go loops), a block is widened to
// float32 once into a per-worker scratch and reused by every token of its
// expert.
const (
	cpuRowsW1 = 32 // intermediate rows per item (gate and up: 2×32 weight rows)
	cpuRowsW2 = 64 // output rows per item
)

// ForwardCPU computes the layer in float32 on all cores: x is [M,H] (rounded
// to bf16 first, as the GPU stores it), out is [M,H]. The intermediate
// (silu(gate)·up) is rounded to bf16 too, as the GPU stores it: the two
// paths differ only in the order of their float32 sums. Slots are grouped by
// expert; work items are (expert, block of weight rows), which gives the
// cores enough items even for a single token. The top-k combine sums each
// token's slots in slot order, so the result does not depend on scheduling.
func ForwardCPU(l *Layer, x []float32, r routing.Routing, out []float32) {
	forwardCPU(l, x, r, out, nil)
}

// CPUStages are the wall-clock times of one ForwardCPU pass's stages, named
// as the CUDA pass's (StageName): align (input rounding, grouping slots by
// expert, buffers), gemm1, gemm2 and combine.
type CPUStages struct{ Align, GEMM1, GEMM2, Combine time.Duration }

// ForwardCPUTimed is ForwardCPU, timing its stages: the same result, bit
// for bit.
func ForwardCPUTimed(l *Layer, x []float32, r routing.Routing, out []float32) CPUStages {
	var st CPUStages
	forwardCPU(l, x, r, out, &st)
	return st
}

func forwardCPU(l *Layer, x []float32, r routing.Routing, out []float32, st *CPUStages) {
	r = r.Computed() // dropped slots compute nothing
	t0 := time.Now()
	var laps [4]time.Duration // a few clock reads a pass: always taken
	lap := func(i int) {
		now := time.Now()
		laps[i], t0 = now.Sub(t0), now
	}
	defer func() {
		if st != nil {
			*st = CPUStages{Align: laps[0], GEMM1: laps[1], GEMM2: laps[2], Combine: laps[3]}
		}
	}()
	s := l.Shape
	if len(x) < r.M*s.H || len(out) < r.M*s.H {
		panic(fmt.Sprintf("moe.ForwardCPU: x has %d and out %d elements, want %d", len(x), len(out), r.M*s.H))
	}
	m, k := r.M, r.K
	xb := make([]float32, m*s.H)
	var xb16 []uint16 // the same inputs as bf16 bits: the AVX512-BF16 kernel's
	if useAVX512BF16 {
		xb16 = make([]uint16, m*s.H)
	}
	for i := range xb {
		h := F32ToBF16(x[i])
		xb[i] = BF16ToF32(h)
		if xb16 != nil {
			xb16[i] = h
		}
	}
	al := Align(r.IDs, s.E, 1)
	// The intermediate is rounded to bf16, as the GPU stores it; with
	// AVX512-BF16 gemm2 reads it as bf16 bits (act16).
	act := make([]float32, m*k*s.I)
	var act16 []uint16
	if useAVX512BF16 {
		act16 = make([]uint16, len(act))
	}
	setAct := func(i int, g, u float32) {
		h := F32ToBF16(silu(g) * u)
		act[i] = BF16ToF32(h)
		if act16 != nil {
			act16[i] = h
		}
	}
	y := make([]float32, m*k*s.H)

	type item struct{ e, lo, hi int }
	var items1, items2 []item
	for e := 0; e < s.E; e++ {
		if al.Counts[e] == 0 {
			continue
		}
		for lo := 0; lo < s.I; lo += cpuRowsW1 {
			items1 = append(items1, item{e, lo, min(lo+cpuRowsW1, s.I)})
		}
		for lo := 0; lo < s.H; lo += cpuRowsW2 {
			items2 = append(items2, item{e, lo, min(lo+cpuRowsW2, s.H)})
		}
	}
	slotsOf := func(e int) []int32 { return al.SortedSlots[al.Offsets[e]:al.Offsets[e+1]] }
	lap(0)

	scratch1, scratch2 := 2*cpuRowsW1*s.H, cpuRowsW2*s.I // widened tiles: Go loops only
	if useAVX2 {
		scratch1, scratch2 = 0, 0
	}
	parallel(len(items1), scratch1, func(n int, scratch []float32) {
		it := items1[n]
		rows := it.hi - it.lo
		w1 := l.W1[it.e*2*s.I*s.H:]
		row := func(j int) []uint16 { return w1[j*s.H : (j+1)*s.H] }
		switch slots := slotsOf(it.e); len(slots) {
		case 1:
			// One token: widening the tile first would read and write it
			// once more for a single use; read the bf16 rows directly.
			st := int(slots[0])
			xv := xb[st/k*s.H : (st/k+1)*s.H]
			for i := 0; i < rows; i += 2 {
				i1 := min(i+1, rows-1)
				g0, u0, g1, u1 := dot4bf16(row(it.lo+i), row(s.I+it.lo+i), row(it.lo+i1), row(s.I+it.lo+i1), xv)
				setAct(st*s.I+it.lo+i, g0, u0)
				setAct(st*s.I+it.lo+i1, g1, u1)
			}
			return
		case 2:
			// Two tokens: still one use of each weight per token, and the
			// four-token kernel would spend half its multiplies on copies.
			s0, s1 := int(slots[0]), int(slots[1])
			x0, x1 := xb[s0/k*s.H:(s0/k+1)*s.H], xb[s1/k*s.H:(s1/k+1)*s.H]
			for i := 0; i < rows; i++ {
				g, u := dot2x2bf16(row(it.lo+i), row(s.I+it.lo+i), x0, x1)
				setAct(s0*s.I+it.lo+i, g[0], u[0])
				setAct(s1*s.I+it.lo+i, g[1], u[1])
			}
			return
		}
		// Three tokens or more. With AVX512-BF16, four weight rows (two
		// gate, two up) meet four bf16 token rows at a time.
		if useAVX512BF16 {
			slots := slotsOf(it.e)
			for c := 0; c < len(slots); c += 4 {
				xs, sl, nt := group4(slots, c, func(st int) []uint16 { return xb16[st/k*s.H : (st/k+1)*s.H] })
				for i := 0; i < rows; i += 2 {
					i1 := min(i+1, rows-1)
					d := dot4x4bf16(&[4][]uint16{row(it.lo + i), row(s.I + it.lo + i), row(it.lo + i1), row(s.I + it.lo + i1)}, &xs)
					for t := 0; t < nt; t++ {
						setAct(sl[t]*s.I+it.lo+i, d[t], d[4+t])
						setAct(sl[t]*s.I+it.lo+i1, d[8+t], d[12+t])
					}
				}
			}
			return
		}
		// Without AVX2 the tile is widened once and reused by every group
		// of four tokens; with it, the bf16 rows are read again per group
		// (half the bytes of a widened tile).
		var gate, up []float32
		if !useAVX2 {
			gate = scratch[:rows*s.H]
			up = scratch[rows*s.H : 2*rows*s.H]
			FromBF16(gate, w1[it.lo*s.H:it.hi*s.H])
			FromBF16(up, w1[(s.I+it.lo)*s.H:(s.I+it.hi)*s.H])
		}
		slots := slotsOf(it.e)
		for c := 0; c < len(slots); c += 4 {
			xs, sl, nt := group4(slots, c, func(st int) []float32 { return xb[st/k*s.H : (st/k+1)*s.H] })
			for i := 0; i < rows; i++ {
				var gf, uf []float32
				if gate != nil {
					gf, uf = gate[i*s.H:(i+1)*s.H], up[i*s.H:(i+1)*s.H]
				}
				g, u := pairDots(row(it.lo+i), row(s.I+it.lo+i), gf, uf, &xs, nt)
				for t := 0; t < nt; t++ {
					setAct(sl[t]*s.I+it.lo+i, g[t], u[t])
				}
			}
		}
	})
	lap(1)

	parallel(len(items2), scratch2, func(n int, scratch []float32) {
		it := items2[n]
		rows := it.hi - it.lo
		row := func(j int) []uint16 { return l.W2[(it.e*s.H+j)*s.I : (it.e*s.H+j+1)*s.I] }
		switch slots := slotsOf(it.e); len(slots) {
		case 1:
			st := int(slots[0])
			av := act[st*s.I : (st+1)*s.I]
			w := r.Weights[st]
			for i := 0; i < rows; i += 4 {
				j := [4]int{i, min(i+1, rows-1), min(i+2, rows-1), min(i+3, rows-1)}
				a0, a1, a2, a3 := dot4bf16(row(it.lo+j[0]), row(it.lo+j[1]), row(it.lo+j[2]), row(it.lo+j[3]), av)
				for t, v := range [4]float32{a0, a1, a2, a3} {
					y[st*s.H+it.lo+j[t]] = w * v
				}
			}
			return
		case 2:
			s0, s1 := int(slots[0]), int(slots[1])
			a0, a1 := act[s0*s.I:(s0+1)*s.I], act[s1*s.I:(s1+1)*s.I]
			w0, w1 := r.Weights[s0], r.Weights[s1]
			for i := 0; i < rows; i += 2 {
				i1 := min(i+1, rows-1)
				p, q := dot2x2bf16(row(it.lo+i), row(it.lo+i1), a0, a1)
				y[s0*s.H+it.lo+i], y[s1*s.H+it.lo+i] = w0*p[0], w1*p[1]
				y[s0*s.H+it.lo+i1], y[s1*s.H+it.lo+i1] = w0*q[0], w1*q[1]
			}
			return
		}
		if useAVX512BF16 {
			// Four output rows meet four bf16 intermediate rows at a time.
			slots := slotsOf(it.e)
			for c := 0; c < len(slots); c += 4 {
				as, sl, nt := group4(slots, c, func(st int) []uint16 { return act16[st*s.I : (st+1)*s.I] })
				for i := 0; i < rows; i += 4 {
					j := [4]int{i, min(i+1, rows-1), min(i+2, rows-1), min(i+3, rows-1)}
					d := dot4x4bf16(&[4][]uint16{row(it.lo + j[0]), row(it.lo + j[1]), row(it.lo + j[2]), row(it.lo + j[3])}, &as)
					for t := 0; t < nt; t++ {
						w := r.Weights[sl[t]]
						for q := range j {
							y[sl[t]*s.H+it.lo+j[q]] = w * d[4*q+t]
						}
					}
				}
			}
			return
		}
		var w2 []float32
		if !useAVX2 {
			w2 = scratch[:rows*s.I]
			FromBF16(w2, l.W2[(it.e*s.H+it.lo)*s.I:(it.e*s.H+it.hi)*s.I])
		}
		wrow := func(i int) []float32 {
			if w2 == nil {
				return nil
			}
			return w2[i*s.I : (i+1)*s.I]
		}
		slots := slotsOf(it.e)
		for c := 0; c < len(slots); c += 4 {
			as, sl, nt := group4(slots, c, func(st int) []float32 { return act[st*s.I : (st+1)*s.I] })
			for i := 0; i < rows; i += 2 {
				i1 := min(i+1, rows-1) // an odd last row pairs with itself
				a, b := pairDots(row(it.lo+i), row(it.lo+i1), wrow(i), wrow(i1), &as, nt)
				for t := 0; t < nt; t++ {
					w := r.Weights[sl[t]]
					y[sl[t]*s.H+it.lo+i] = w * a[t]
					y[sl[t]*s.H+it.lo+i1] = w * b[t]
				}
			}
		}
	})
	lap(2)

	// Combine: tokens in blocks; each output element sums its slots in order.
	const tokBlock = 16
	parallel((m+tokBlock-1)/tokBlock, 0, func(n int, _ []float32) {
		for tok := n * tokBlock; tok < min((n+1)*tokBlock, m); tok++ {
			o := out[tok*s.H : (tok+1)*s.H]
			clear(o)
			for j := 0; j < k; j++ {
				if r.IDs[tok*k+j] < 0 {
					continue
				}
				yr := y[(tok*k+j)*s.H : (tok*k+j+1)*s.H]
				for h := range o {
					o[h] += yr[h]
				}
			}
		}
	})
	lap(3)
}

// group4 is the group of four slots from c of an expert's slots, each
// with its input row: a group short of four repeats its last slot (nt
// counts the real ones), so the four-token kernels always have four rows.
func group4[T any](slots []int32, c int, rowOf func(slot int) []T) (rows [4][]T, sl [4]int, nt int) {
	for t := range 4 {
		sl[t] = int(slots[min(c+t, len(slots)-1)])
		rows[t] = rowOf(sl[t])
	}
	return rows, sl, min(4, len(slots)-c)
}

// pairDots returns the dot products of two weight rows with nt (1 to 4)
// vectors of xs: straight from the bf16 rows b0, b1 with AVX2, else from
// their widened copies f0, f1; one or two vectors take the two-vector kernel
// (no multiplies spent on copies).
func pairDots(b0, b1 []uint16, f0, f1 []float32, xs *[4][]float32, nt int) (a, b [4]float32) {
	switch {
	case useAVX2 && nt <= 2:
		p, q := dot2x2bf16(b0, b1, xs[0], xs[1])
		a[0], a[1], b[0], b[1] = p[0], p[1], q[0], q[1]
	case useAVX2:
		a, b = dot2x4bf16(b0, b1, xs[0], xs[1], xs[2], xs[3])
	case nt <= 2:
		p, q := dot2x2(f0, f1, xs[0], xs[1])
		a[0], a[1], b[0], b[1] = p[0], p[1], q[0], q[1]
	default:
		a, b = dot2x4(f0, f1, xs[0], xs[1], xs[2], xs[3])
	}
	return
}

func silu(g float32) float32 { return g / (1 + float32(math.Exp(float64(-g)))) }

// parallel runs f(0..n-1) on GOMAXPROCS workers, each with its own scratch.
func parallel(n, scratch int, f func(i int, scratch []float32)) {
	workers := min(runtime.GOMAXPROCS(0), n)
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]float32, scratch)
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				f(i, buf)
			}
		}()
	}
	wg.Wait()
}

// dot2x4 returns the dot products of two weight rows with four vectors:
// eight independent sums, each weight and input loaded once per step.
func dot2x4(a0, a1, b0, b1, b2, b3 []float32) (r0, r1 [4]float32) {
	n := len(a0)
	a1, b0, b1, b2, b3 = a1[:n], b0[:n], b1[:n], b2[:n], b3[:n]
	var s00, s01, s02, s03, s10, s11, s12, s13 float32
	for i := 0; i < n; i++ {
		w0, w1 := a0[i], a1[i]
		x0, x1, x2, x3 := b0[i], b1[i], b2[i], b3[i]
		s00 += w0 * x0
		s01 += w0 * x1
		s02 += w0 * x2
		s03 += w0 * x3
		s10 += w1 * x0
		s11 += w1 * x1
		s12 += w1 * x2
		s13 += w1 * x3
	}
	return [4]float32{s00, s01, s02, s03}, [4]float32{s10, s11, s12, s13}
}

// dot2x2 is dot2x4 for two vectors.
func dot2x2(a0, a1, b0, b1 []float32) (r0, r1 [2]float32) {
	n := len(a0)
	a1, b0, b1 = a1[:n], b0[:n], b1[:n]
	var s00, s01, s10, s11 float32
	for i := 0; i < n; i++ {
		w0, w1 := a0[i], a1[i]
		x0, x1 := b0[i], b1[i]
		s00 += w0 * x0
		s01 += w0 * x1
		s10 += w1 * x0
		s11 += w1 * x1
	}
	return [2]float32{s00, s01}, [2]float32{s10, s11}
}

// dot2x2bf16 is dot2x2 on two bf16 weight rows, widened as they are
// loaded: an expert with two tokens uses each weight twice, too few to pay
// for widening the tile first.
func dot2x2bf16(a0, a1 []uint16, b0, b1 []float32) (r0, r1 [2]float32) {
	n := len(b0)
	a0, a1, b1 = a0[:n], a1[:n], b1[:n]
	var s00, s01, s10, s11 float32
	i := 0
	if n8 := n &^ 7; useAVX2 && n8 > 0 {
		var v [4]float32
		dot2x2bf16AVX2(&a0[0], &a1[0], &b0[0], &b1[0], n8, &v)
		s00, s01, s10, s11 = v[0], v[1], v[2], v[3]
		i = n8
	}
	for ; i < n; i++ {
		w0, w1 := BF16ToF32(a0[i]), BF16ToF32(a1[i])
		x0, x1 := b0[i], b1[i]
		s00 += w0 * x0
		s01 += w0 * x1
		s10 += w1 * x0
		s11 += w1 * x1
	}
	return [2]float32{s00, s01}, [2]float32{s10, s11}
}

// dot2x4bf16 is dot2x4 on bf16 weight rows, widened as they are loaded.
func dot2x4bf16(a0, a1 []uint16, b0, b1, b2, b3 []float32) (r0, r1 [4]float32) {
	n := len(b0)
	a0, a1, b1, b2, b3 = a0[:n], a1[:n], b1[:n], b2[:n], b3[:n]
	var v [8]float32
	i := 0
	if n8 := n &^ 7; useAVX2 && n8 > 0 {
		dot2x4bf16AVX2(&a0[0], &a1[0], &b0[0], &b1[0], &b2[0], &b3[0], n8, &v)
		i = n8
	}
	for ; i < n; i++ {
		w0, w1 := BF16ToF32(a0[i]), BF16ToF32(a1[i])
		x0, x1, x2, x3 := b0[i], b1[i], b2[i], b3[i]
		v[0] += w0 * x0
		v[1] += w0 * x1
		v[2] += w0 * x2
		v[3] += w0 * x3
		v[4] += w1 * x0
		v[5] += w1 * x1
		v[6] += w1 * x2
		v[7] += w1 * x3
	}
	return [4]float32{v[0], v[1], v[2], v[3]}, [4]float32{v[4], v[5], v[6], v[7]}
}

// dot4bf16 returns the dot products of four bf16 weight rows with one
// vector, widening each weight as it is loaded: the decode case, where a
// tile is used by a single token.
func dot4bf16(a0, a1, a2, a3 []uint16, x []float32) (r0, r1, r2, r3 float32) {
	n := len(x)
	a0, a1, a2, a3 = a0[:n], a1[:n], a2[:n], a3[:n]
	i := 0
	if n8 := n &^ 7; useAVX2 && n8 > 0 {
		var v [4]float32
		dot4bf16AVX2(&a0[0], &a1[0], &a2[0], &a3[0], &x[0], n8, &v)
		r0, r1, r2, r3 = v[0], v[1], v[2], v[3]
		i = n8
	}
	for ; i < n; i++ {
		xi := x[i]
		r0 += BF16ToF32(a0[i]) * xi
		r1 += BF16ToF32(a1[i]) * xi
		r2 += BF16ToF32(a2[i]) * xi
		r3 += BF16ToF32(a3[i]) * xi
	}
	return
}

// dot4x4bf16 returns the dot products of four bf16 weight rows with four
// bf16 token rows: d[4r+t] = a[r]·b[t], in float32.
func dot4x4bf16(a, b *[4][]uint16) (d [16]float32) {
	n := len(b[0])
	for r := range a {
		a[r] = a[r][:n]
		b[r] = b[r][:n]
	}
	i := 0
	if n32 := n &^ 31; useAVX512BF16 && n32 > 0 {
		dot4x4bf16AVX512(&a[0][0], &a[1][0], &a[2][0], &a[3][0], &b[0][0], &b[1][0], &b[2][0], &b[3][0], n32, &d)
		i = n32
	}
	for ; i < n; i++ {
		for r := range a {
			w := BF16ToF32(a[r][i])
			for t := range b {
				d[4*r+t] += w * BF16ToF32(b[t][i])
			}
		}
	}
	return d
}
