package nvmlinfo

import (
	"math"
	"testing"
)

func TestPCIeGBps(t *testing.T) {
	for _, tc := range []struct {
		name       string
		gen, width int
		want       float64
	}{
		{"gen5 x16 (H200 host link)", 5, 16, 63.015},
		{"gen4 x16", 4, 16, 31.508},
		{"gen3 x8", 3, 8, 7.877},
		{"gen1 x1 uses 8b/10b", 1, 1, 0.25},
		{"unknown generation", 9, 16, 0},
		{"no lanes", 5, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := PCIeGBps(tc.gen, tc.width); math.Abs(got-tc.want) > 0.001 {
				t.Errorf("PCIeGBps(%d, %d) = %.4f, want %.4f", tc.gen, tc.width, got, tc.want)
			}
		})
	}
}

// Without the NVIDIA driver Query must fail with an error, never panic;
// with one it must name at least one GPU.
func TestQueryNeverPanics(t *testing.T) {
	r, err := Query()
	if err != nil {
		t.Logf("no NVML here: %v", err)
		if r != nil {
			t.Errorf("Query returned a report together with error %v", err)
		}
		return
	}
	if len(r.GPUs) == 0 || r.GPUs[0].Name == "" {
		t.Errorf("NVML loaded but reported no named GPU: %+v", r)
	}
}
