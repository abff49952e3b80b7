package cpupeak

import "testing"

// Measure counts the work it was asked for, on every thread, and takes time
// doing it.
func TestMeasure(t *testing.T) {
	if !Available() {
		t.Skip("no AVX2+FMA on this CPU: the CPU ceiling falls back to gonum")
	}
	flops, d := Measure(2, 1000)
	if flops != 2*1000*flopsPerIter {
		t.Errorf("flops %v, want %v", flops, 2*1000*flopsPerIter)
	}
	if d <= 0 {
		t.Errorf("took %v", d)
	}
}
