package moe

import (
	"math"
	"runtime"
	"sync"
)

// Layer holds one MoE layer's weights as bf16 bits.
type Layer struct {
	Shape Shape
	W1    []uint16 // [E][2I][H]: gate rows 0..I-1, up rows I..2I-1
	W2    []uint16 // [E][H][I]
}

// Random streams. Every tensor element is a pure function of (seed, stream,
// index) — a counter-based generator — so that other programs (the python
// peers in scripts/peers) regenerate exactly the same weights and inputs
// without mstar shipping gigabytes of them.
const (
	streamW1 = 1
	streamW2 = 2
	streamX  = 3
)

// counterRand is splitmix64's finaliser over seed, stream and index.
func counterRand(seed, stream, idx uint64) uint64 {
	z := (seed ^ (stream * 0xD1B54A32D192ED03)) + idx*0x9E3779B97F4A7C15
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
	z = (z ^ (z >> 27)) * 0x94D049BB133111EB
	return z ^ (z >> 31)
}

// uniformBF16 is a value uniform in [-a, a) rounded to bf16: 24 random bits
// give an integer n in [-2^24, 2^24), scaled by a/2^24 in one float32
// multiply (no fused add, so every language computes the same bits).
func uniformBF16(seed, stream, idx uint64, scale float32) uint16 {
	k := int64(counterRand(seed, stream, idx) >> 40)
	n := 2*k - 1<<24
	return F32ToBF16(float32(n) * scale)
}

// scaleFor is the float32 multiplier for values uniform in ±sqrt(3/fanIn),
// whose variance is 1/fanIn: dot products with order-one inputs stay order one.
func scaleFor(fanIn int) float32 {
	a := float32(math.Sqrt(3.0 / float64(fanIn)))
	return a / (1 << 24)
}

// NewLayer returns a layer with deterministic random bf16 weights.
// W1 elements are uniform in ±sqrt(3/H) and W2 in ±sqrt(3/I), so with inputs
// uniform in ±1 every stage's values stay of order one.
func NewLayer(s Shape, seed uint64) *Layer {
	l := &Layer{
		Shape: s,
		W1:    make([]uint16, int64(s.E)*2*int64(s.I)*int64(s.H)),
		W2:    make([]uint16, int64(s.E)*int64(s.H)*int64(s.I)),
	}
	fill(l.W1, seed, streamW1, scaleFor(s.H))
	fill(l.W2, seed, streamW2, scaleFor(s.I))
	return l
}

// RandomInput returns x[M,H] uniform in ±1, already bf16-representable.
func RandomInput(m, h int, seed uint64) []float32 {
	b := make([]uint16, m*h)
	fill(b, seed, streamX, 1.0/(1<<24))
	x := make([]float32, m*h)
	FromBF16(x, b)
	return x
}

// fill writes element i of the stream into dst[i], in parallel.
func fill(dst []uint16, seed, stream uint64, scale float32) {
	const chunk = 1 << 20
	n := len(dst)
	workers := runtime.GOMAXPROCS(0)
	var wg sync.WaitGroup
	next := make(chan int, (n+chunk-1)/chunk)
	for lo := 0; lo < n; lo += chunk {
		next <- lo
	}
	close(next)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for lo := range next {
				hi := min(lo+chunk, n)
				for i := lo; i < hi; i++ {
					dst[i] = uniformBF16(seed, stream, uint64(i), scale)
				}
			}
		}()
	}
	wg.Wait()
}
