package moe

import (
	"fmt"
	"testing"
)

// BenchmarkForwardCPU times the CPU path at decode and prefill batch sizes on
// a quarter of qwen3-30b-a3b's experts (E=32: the weights stay affordable to
// generate, and each token still touches k=8 of them).
func BenchmarkForwardCPU(b *testing.B) {
	s := Shape{E: 32, K: 8, H: 2048, I: 768}
	l := NewLayer(s, 1)
	for _, m := range []int{1, 16, 256} {
		b.Run(fmt.Sprintf("M=%d", m), func(b *testing.B) {
			x := make([]float32, m*s.H)
			for i := range x {
				x[i] = float32(i%13) / 13
			}
			r := UniformRouting(m, s.E, s.K, 2)
			out := make([]float32, m*s.H)
			b.SetBytes(int64(len(l.W1)+len(l.W2)) * 2)
			b.ResetTimer()
			for b.Loop() {
				ForwardCPU(l, x, r, out)
			}
		})
	}
}
