// Package cpupeak measures the CPU's float32 multiply-add peak: the compute
// ceiling the CPU backend's rates are held to. No BLAS in a pure Go binary
// reaches it (gonum's float64 Dgemm ran at a tenth of it on a 2-core EPYC,
// below mstar's own AVX2 MoE kernels), so it is measured directly: chains
// of independent fused multiply-adds in registers, on every core.
package cpupeak

import (
	"runtime"
	"sync"
	"time"
)

// flopsPerIter is what one iteration of the kernel computes: 12 vector
// registers of 8 float32 lanes, one fused multiply-add (2 flops) each.
const flopsPerIter = 12 * 8 * 2

// Available reports whether this CPU has a peak kernel (amd64 with AVX2 and
// FMA); Method says what it measures.
func Available() bool { return available() }

// Method names what Measure runs.
const Method = "AVX2 FMA peak, float32"

// Measure runs iters iterations of the peak kernel on each of threads
// goroutines at once (each locked to its thread) and returns the flops done
// and the wall time they took.
func Measure(threads, iters int) (flops float64, d time.Duration) {
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range threads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			<-start
			fmaLoop(iters)
		}()
	}
	t0 := time.Now()
	close(start)
	wg.Wait()
	return float64(threads) * float64(iters) * flopsPerIter, time.Since(t0)
}
