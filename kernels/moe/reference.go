package moe

import (
	"math"
	"runtime"
	"sync"

	"github.com/mstar-dev/mstar/kernels/routing"
)

// Reference computes the layer in float64 from the bf16 weights and the
// bf16-rounded inputs, without rounding any intermediate: the oracle every
// other implementation is checked against. x is [M,H]; the result is [M,H].
func Reference(l *Layer, x []float32, r routing.Routing) []float64 {
	tokens := make([]int, r.M)
	for i := range tokens {
		tokens[i] = i
	}
	return ReferenceTokens(l, x, r, tokens)
}

// ReferenceTokens is Reference for the listed tokens only (a sampled check
// at large M): row i of the result is token tokens[i].
func ReferenceTokens(l *Layer, x []float32, r routing.Routing, tokens []int) []float64 {
	return referenceTokens(l, x, r, tokens, false)
}

// referenceTokens is ReferenceTokens; roundAct rounds the intermediate to
// bf16, as ForwardCPU and the GPU store it, which leaves their float32
// sums as the only difference (the tests' tight check).
func referenceTokens(l *Layer, x []float32, r routing.Routing, tokens []int, roundAct bool) []float64 {
	r = r.Computed()
	s := l.Shape
	out := make([]float64, len(tokens)*s.H)
	var wg sync.WaitGroup
	next := make(chan int, len(tokens))
	for i := range tokens {
		next <- i
	}
	close(next)
	for w := 0; w < runtime.GOMAXPROCS(0); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			xr := make([]float64, s.H)
			act := make([]float64, s.I)
			for i := range next {
				m := tokens[i]
				for h := 0; h < s.H; h++ {
					xr[h] = float64(RoundBF16(x[m*s.H+h]))
				}
				o := out[i*s.H : (i+1)*s.H]
				for j := 0; j < r.K; j++ {
					e := r.IDs[m*r.K+j]
					if e < 0 {
						continue
					}
					referenceSlot(l, int(e), xr, act, float64(r.Weights[m*r.K+j]), o, roundAct)
				}
			}
		}()
	}
	wg.Wait()
	return out
}

func referenceSlot(l *Layer, e int, x, act []float64, w float64, out []float64, roundAct bool) {
	s := l.Shape
	w1 := l.W1[e*2*s.I*s.H : (e+1)*2*s.I*s.H]
	w2 := l.W2[e*s.H*s.I : (e+1)*s.H*s.I]
	for i := 0; i < s.I; i++ {
		g := dotBF16F64(w1[i*s.H:(i+1)*s.H], x)
		u := dotBF16F64(w1[(s.I+i)*s.H:(s.I+i+1)*s.H], x)
		act[i] = g / (1 + math.Exp(-g)) * u
		if roundAct {
			act[i] = float64(RoundBF16(float32(act[i])))
		}
	}
	for h := 0; h < s.H; h++ {
		out[h] += w * dotBF16F64(w2[h*s.I:(h+1)*s.I], act)
	}
}

func dotBF16F64(w []uint16, x []float64) float64 {
	x = x[:len(w)]
	var s0, s1 float64
	i := 0
	for ; i+1 < len(w); i += 2 {
		s0 += float64(BF16ToF32(w[i])) * x[i]
		s1 += float64(BF16ToF32(w[i+1])) * x[i+1]
	}
	for ; i < len(w); i++ {
		s0 += float64(BF16ToF32(w[i])) * x[i]
	}
	return s0 + s1
}

// RelL2 is ‖got − want‖₂ / ‖want‖₂. A NaN or infinity in got makes it NaN or
// +Inf, which fails any threshold written as !(err <= limit). When want is
// all zeros it is 0 if got is too and +Inf otherwise.
func RelL2(got []float32, want []float64) float64 {
	if len(got) != len(want) {
		return math.Inf(1)
	}
	var num, den float64
	for i, g := range got {
		d := float64(g) - want[i]
		num += d * d
		den += want[i] * want[i]
	}
	if den == 0 {
		if num == 0 {
			return 0
		}
		return math.Inf(1)
	}
	return math.Sqrt(num / den)
}
