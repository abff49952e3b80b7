package moe

import "golang.org/x/sys/cpu"

// useAVX2 picks the AVX2+FMA kernels for the CPU path's bf16 dot products
// (8 weights widened and multiplied per instruction); the pure Go loops
// remain for other CPUs and for the tails.
var useAVX2 = cpuHasAVX2()

// useAVX512BF16 picks the AVX512-BF16 kernel for groups of three or four
// tokens: VDPBF16PS multiplies bf16 pairs straight into float32 sums, 32
// products per instruction, with no widening. Every instruction of the
// kernel is a 512-bit form (AVX512F), so VL is not needed.
var useAVX512BF16 = cpu.X86.HasAVX512F && cpu.X86.HasAVX512BF16

// dot4bf16AVX2 writes the dot products of the first n elements (a multiple
// of 8) of four bf16 rows with x to out.
//
//go:noescape
func dot4bf16AVX2(a0, a1, a2, a3 *uint16, x *float32, n int, out *[4]float32)

// dot2x2bf16AVX2 writes the dot products of two bf16 rows with two vectors
// over their first n elements (a multiple of 8): out = {a0·b0, a0·b1,
// a1·b0, a1·b1}.
//
//go:noescape
func dot2x2bf16AVX2(a0, a1 *uint16, b0, b1 *float32, n int, out *[4]float32)

func cpuHasAVX2() bool { return cpu.X86.HasAVX2 && cpu.X86.HasFMA }

// widenBF16AVX2 widens the first n bf16 values of src (a multiple of 16)
// into dst.
//
//go:noescape
func widenBF16AVX2(dst *float32, src *uint16, n int)

// dot2x4bf16AVX2 writes the dot products of two bf16 rows with four
// vectors over their first n elements (a multiple of 8): out = {a0·b0..a0·b3,
// a1·b0..a1·b3}.
//
//go:noescape
func dot2x4bf16AVX2(a0, a1 *uint16, b0, b1, b2, b3 *float32, n int, out *[8]float32)

// dot4x4bf16AVX512 writes out[4r+t] = ar·bt over the first n elements (a
// multiple of 32) of four bf16 weight rows and four bf16 token rows.
//
//go:noescape
func dot4x4bf16AVX512(a0, a1, a2, a3, b0, b1, b2, b3 *uint16, n int, out *[16]float32)
