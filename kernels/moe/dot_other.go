//go:build !amd64

package moe

const (
	useAVX2       = false
	useAVX512BF16 = false
)

func dot4bf16AVX2(a0, a1, a2, a3 *uint16, x *float32, n int, out *[4]float32) {
	panic("moe: AVX2 kernel on a CPU without it")
}

func dot2x2bf16AVX2(a0, a1 *uint16, b0, b1 *float32, n int, out *[4]float32) {
	panic("moe: AVX2 kernel on a CPU without it")
}

func widenBF16AVX2(dst *float32, src *uint16, n int) {
	panic("moe: AVX2 kernel on a CPU without it")
}

func dot2x4bf16AVX2(a0, a1 *uint16, b0, b1, b2, b3 *float32, n int, out *[8]float32) {
	panic("moe: AVX2 kernel on a CPU without it")
}

func dot4x4bf16AVX512(a0, a1, a2, a3, b0, b1, b2, b3 *uint16, n int, out *[16]float32) {
	panic("moe: AVX512-BF16 kernel on a CPU without it")
}
