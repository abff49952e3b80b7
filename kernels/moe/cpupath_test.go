//go:build amd64

package moe

import (
	"testing"

	"github.com/mstar-dev/mstar/kernels/routing"
)

// The label names the path each expert took, for every CPU kind.
func TestCPUKernelsNamesThePathThatRan(t *testing.T) {
	defer func(a, b bool) { useAVX2, useAVX512BF16 = a, b }(useAVX2, useAVX512BF16)
	// Expert 0: four tokens; expert 2: one; expert 3: two; one slot remote.
	r := routing.Routing{IDs: []int32{0, 2, 0, 3, 0, 3, 0, routing.Empty}, M: 4, K: 2}
	for _, tc := range []struct {
		avx2, bf16 bool
		want       string
	}{
		{true, true, "cpu: AVX512-BF16 for 1 experts of 3+ tokens, AVX2+FMA for 2 of 1–2 tokens; float32 sums"},
		{true, false, "cpu: AVX2+FMA for 1 experts of 3+ tokens, AVX2+FMA for 2 of 1–2 tokens; float32 sums"},
		{false, false, "cpu: Go loops for 1 experts of 3+ tokens, Go loops for 2 of 1–2 tokens; float32 sums"},
	} {
		useAVX2, useAVX512BF16 = tc.avx2, tc.bf16
		if got := CPUKernels(r, 4); got != tc.want {
			t.Errorf("avx2 %v avx512-bf16 %v: %q, want %q", tc.avx2, tc.bf16, got, tc.want)
		}
	}
	useAVX2, useAVX512BF16 = true, true
	if got := CPUKernels(routing.Routing{IDs: []int32{1}, M: 1, K: 1}, 4); got != "cpu: AVX2+FMA for 1 of 1–2 tokens; float32 sums" {
		t.Errorf("one token: %q", got)
	}
}
