package nvmlinfo

import (
	"math/bits"
	"slices"
	"testing"
)

func TestCPUsOfMask(t *testing.T) {
	if bits.UintSize != 64 {
		t.Skip("the masks below are of 64-bit words")
	}
	for _, tc := range []struct {
		mask []uint
		want []int
	}{
		{nil, nil},
		{[]uint{0}, nil},
		{[]uint{0b1011}, []int{0, 1, 3}},
		{[]uint{0, 1 << 63}, []int{127}},
		{[]uint{0xffff, 1}, []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 64}},
	} {
		if got := CPUsOfMask(tc.mask); !slices.Equal(got, tc.want) {
			t.Errorf("CPUsOfMask(%b) = %v, want %v", tc.mask, got, tc.want)
		}
	}
}

// Without an NVIDIA driver the affinity is unknown, with the reason.
func TestCPUAffinityWithoutNVML(t *testing.T) {
	if _, err := Query(); err == nil {
		t.Skip("NVML works here")
	}
	if cpus, err := CPUAffinity("0000:00:00.0"); err == nil || cpus != nil {
		t.Errorf("CPUAffinity without NVML = %v, %v; want an error", cpus, err)
	}
}
