package cpupeak

import "testing"

// Each peak kernel runs the instructions it claims: a lane of its first sum
// holds what iters multiply-adds of ones make (a wrongly encoded
// instruction, or one that never ran, leaves something else).
func TestKernelsComputeWhatTheyCount(t *testing.T) {
	ks := kernels()
	if len(ks) == 0 {
		t.Skip("no AVX2+FMA on this CPU: the CPU ceiling falls back to gonum")
	}
	for _, k := range ks {
		for _, iters := range []int{0, 1, 1000} {
			if got, want := k.loop(iters), k.lane(iters); got != want {
				t.Errorf("%s: %d iterations left %v in a lane, want %v", k.method, iters, got, want)
			}
		}
	}
}

// Measure counts the best kernel's work, on every thread, and takes time
// doing it.
func TestMeasure(t *testing.T) {
	if !Available() {
		t.Skip("no AVX2+FMA on this CPU: the CPU ceiling falls back to gonum")
	}
	k := kernels()[0]
	flops, d := Measure(2, 1000)
	if want := float64(2 * 1000 * k.flopsPerIter); flops != want {
		t.Errorf("flops %v, want %v", flops, want)
	}
	if d <= 0 {
		t.Errorf("took %v", d)
	}
	if Method() != k.method {
		t.Errorf("Method() = %q, want %q", Method(), k.method)
	}
}

// BenchmarkKernels reports each peak kernel's rate on one thread.
func BenchmarkKernels(b *testing.B) {
	for _, k := range kernels() {
		b.Run(k.method, func(b *testing.B) {
			for b.Loop() {
				k.loop(1_000_000)
			}
			b.ReportMetric(float64(k.flopsPerIter)*1e6*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}
