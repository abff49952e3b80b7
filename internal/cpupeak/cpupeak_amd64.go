package cpupeak

import "golang.org/x/sys/cpu"

// kernels are this CPU's peak loops, the fastest for bf16 inputs first.
func kernels() []kernel {
	var ks []kernel
	if cpu.X86.HasAVX512F && cpu.X86.HasAVX512BF16 {
		// 12 VDPBF16PS on 16 float32 lanes, two bf16 products each; every
		// product is 1×1, so a lane gains 2 per iteration.
		ks = append(ks, kernel{"AVX512-BF16 dot-product peak, bf16 in, float32 sums", 12 * 16 * 2 * 2,
			bf16DotLoop, func(iters int) float32 { return 2 * float32(iters) }})
	}
	if cpu.X86.HasAVX2 && cpu.X86.HasFMA {
		// 12 VFMADD231PS on 8 float32 lanes; 1×1 added per iteration.
		ks = append(ks, kernel{"AVX2 FMA peak, float32", 12 * 8 * 2,
			fmaLoop, func(iters int) float32 { return float32(iters) }})
	}
	return ks
}

// fmaLoop runs iters iterations of 12 independent VFMADD231PS of ones and
// returns a lane of the first sum.
//
//go:noescape
func fmaLoop(iters int) float32

// bf16DotLoop runs iters iterations of 12 independent VDPBF16PS of bf16
// ones and returns a lane of the first sum.
//
//go:noescape
func bf16DotLoop(iters int) float32
