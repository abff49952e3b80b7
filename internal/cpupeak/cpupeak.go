// Package cpupeak measures the CPU's peak multiply-add rate on bf16 inputs:
// the compute ceiling the CPU backend's rates are held to. No BLAS in a
// pure Go binary reaches it (gonum's float64 Dgemm ran at a tenth of the
// float32 FMA peak on a 2-core EPYC, below mstar's own MoE kernels), so it
// is measured directly: chains of independent multiply-adds in registers,
// on every core, with the fastest instruction the CPU has for bf16 matrices
// (AVX512-BF16's VDPBF16PS, else AVX2 float32 FMA).
package cpupeak

import (
	"runtime"
	"sync"
	"time"
)

// kernel is one peak loop: iters iterations of flopsPerIter flops, and what
// they leave in one lane (a check that the instructions ran as encoded).
type kernel struct {
	method       string
	flopsPerIter int
	loop         func(iters int) float32
	lane         func(iters int) float32 // the lane's value after iters iterations
}

// Available reports whether this CPU has a peak kernel (amd64 with AVX2 and
// FMA at least); Method says what it measures.
func Available() bool { return len(kernels()) > 0 }

// Method names what Measure runs ("" without a kernel).
func Method() string {
	if ks := kernels(); len(ks) > 0 {
		return ks[0].method
	}
	return ""
}

// Measure runs iters iterations of the best peak kernel on each of threads
// goroutines at once (each locked to its thread) and returns the flops done
// and the wall time they took.
func Measure(threads, iters int) (flops float64, d time.Duration) {
	k := kernels()[0]
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range threads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			<-start
			k.loop(iters)
		}()
	}
	t0 := time.Now()
	close(start)
	wg.Wait()
	return float64(threads) * float64(iters) * float64(k.flopsPerIter), time.Since(t0)
}
