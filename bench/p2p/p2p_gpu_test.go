package p2p

import (
	"testing"

	"github.com/mstar-dev/mstar/internal/gpu/cuda"
)

// On a host of two GPUs or more: every pair copies correctly both ways,
// and direct copies are not slower than staged ones where a path exists.
func TestRunOnGPUs(t *testing.T) {
	n, err := cuda.DeviceCount()
	if err != nil || n < 2 {
		t.Skipf("needs two GPUs or more (found %d: %v)", n, err)
	}
	rs, err := Run(t.Context(), Options{Devices: []int{0, 1}, Size: 64 << 20, Samples: 3, Repeat: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 4 {
		t.Fatalf("%d results, want 4 (2 pairs x peer on, off)", len(rs))
	}
	for _, r := range rs {
		if !r.Passed() {
			t.Errorf("%s: %v", r.Key(), r.Gates)
		}
	}
	on, off := Matrix(rs, "on"), Matrix(rs, "off")
	for p, v := range on {
		t.Logf("cuda:%d -> cuda:%d: %.1f GB/s direct, %.1f GB/s staged", p[0], p[1], v, off[p])
		if v < off[p]/2 {
			t.Errorf("cuda:%d -> cuda:%d: direct %.1f GB/s, under half the staged %.1f", p[0], p[1], v, off[p])
		}
	}
}
